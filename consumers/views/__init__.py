"""What a follower keeps: the ``View`` protocol and the standard views.

``replica.ReplicaSet`` holds one replica per source (in the native store of ``cache.events``);
``prefix_index.PrefixIndex`` and ``stats.Stats`` read the follower's ``ReplicaSet``.
"""
