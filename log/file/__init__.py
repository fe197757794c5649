"""The embedded file log: ``file:///dir?fsync=batch``, a single partition (0) in a directory.

Directory layout::

    <dir>/00000000000000000000.log   segments, named by the offset of their first record
    <dir>/00000000000000000000.idx   sparse index per segment (u32 rel offset | u32 position)
    <dir>/LOCK                       flock held by the one writer (its pid inside)
    <dir>/identity.json              the log's identity: a random id and its creation time,
                                     written by the first writer (``log.file.identity``)
    <dir>/pins/<name>.json           retention pins (a Position and its owner each)

Each record is a frame ``u32 length | u32 crc32c(body) | body`` with
``body = u64 offset | f64 timestamp_s | u16 key_length | key | payload`` (little-endian; see
``log.file.framing``). Appends are acknowledged once durable under the ``fsync`` policy
(``always``: fdatasync per append call; ``batch``: group commit shared by concurrent appends;
``never``: handed to the OS). On open the writer truncates a torn tail (``recovered_tail``);
readers stop before one (an append in progress looks the same; ``torn_tail`` reports it).
Damage elsewhere (a frame that fails its checks with whole records after it, or in a sealed
segment) raises ``CorruptRecordError`` naming segment file and byte, and a segment file gone
while its index remains ``MissingSegmentError``, in readers after the records before it. A
readonly reader refuses a missing directory (unless ``create=true``) and one holding something
other than a log (``NotALogError``). A write
that fails part-way (a full disk) is cut back to its last complete record and raises
``LogDiskFullError`` (or a retriable ``LogWriteError``); the same log appends again afterwards.
"""

from log.file.config import FileLogConfig, FsyncPolicy
from log.file.file_log import FileLog
from log.file.recovery import RecoveredTail
from log.file.writer import WriteStats

__all__ = ["FileLog", "FileLogConfig", "FsyncPolicy", "RecoveredTail", "WriteStats"]
