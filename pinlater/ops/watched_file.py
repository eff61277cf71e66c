"""The one way the server notices that a file it reloads changed: a sha256 of its bytes.

Used for the shard map (`pinlater.ops.maintenance`), the queue config and the ServerSet file
(`pinlater.ops.queue_settings`). Content, not mtime: a rewrite with equal bytes is no change, and
a change within the file system's timestamp granularity is still seen.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


class WatchedFile:
    """`changed()` is True once per new content. An unreadable file (missing, mid-rename) is
    no change: the last content read stays the reference."""

    def __init__(self, path: str):
        self.path = path
        self.digest = self._read_digest()

    def _read_digest(self) -> str | None:
        try:
            return hashlib.sha256(Path(self.path).read_bytes()).hexdigest()
        except OSError:
            return None

    def changed(self) -> bool:
        digest = self._read_digest()
        if digest is None or digest == self.digest:
            return False
        self.digest = digest
        return True
