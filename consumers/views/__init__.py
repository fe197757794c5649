"""What a follower keeps: the ``View`` protocol and the standard views.

``replica.ReplicaSet`` holds one replica per source (``replica_codec`` is its snapshot format);
``prefix_index.PrefixIndex`` and ``stats.Stats`` read the follower's ``ReplicaSet``.
"""
