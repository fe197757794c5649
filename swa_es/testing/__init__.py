"""Test doubles shipped with the package.

``SlowLog`` and ``FailingLog`` wrap a real ``EventLog`` to be slow or to fail on cue;
``BlockModel`` is the set of blocks a stream of events describes (the oracle a replica, a
primary or a publisher's output is compared with).
"""

from swa_es.testing.blocks import BlockModel, BlockModelError, ModelBlock
from swa_es.testing.logs import FailingLog, SlowLog

__all__ = ["SlowLog", "FailingLog", "BlockModel", "BlockModelError", "ModelBlock"]
