"""``open_snapshot_store``: which store a URL names, and bad URLs refused before connecting."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumers import DirectorySnapshotStore, open_snapshot_store
from log import ConfigError


async def test_paths_and_file_urls_open_a_directory_store(tmp_path: Path) -> None:
    """A plain path and a file:// URL name the same directory store."""
    plain = await open_snapshot_store(tmp_path / "snap", keep=2)
    url = await open_snapshot_store((tmp_path / "snap").as_uri())
    assert isinstance(plain, DirectorySnapshotStore)
    assert isinstance(url, DirectorySnapshotStore)
    assert plain.directory == url.directory == tmp_path / "snap"
    assert plain.keep == 2


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("kafka://127.0.0.1:1/snaps?group=a/b", "group"),
        ("kafka://127.0.0.1:1/snaps?colour=red", "colour"),
        ("kafka://127.0.0.1:1/snaps?segment_ms=soon", "segment_ms"),
        ("kafka://127.0.0.1:1/bad topic", "topic"),
        ("kafka:///snaps", "host:port"),
        ("file://elsewhere/snaps", "host"),
        ("s3://bucket/snaps", "unknown store scheme 's3'"),
    ],
)
async def test_bad_urls_are_refused_naming_what(url: str, needle: str) -> None:
    """A bad group, option, topic or host is a ConfigError before any connection is tried."""
    with pytest.raises(ConfigError, match=needle):
        await open_snapshot_store(url)
