"""The worker's output, copied to its log file with a size cap.

A candidate that prints gigabytes must not fill the disk nor the engine's memory: the first
``head_bytes`` go to the file as they come (the build log streams from there), then only the last
``tail_bytes`` are kept and appended, after a line saying how much was dropped, when the output ends.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

HEAD_BYTES = 8_000_000
TAIL_BYTES = 256_000


class CappedLog:
    """Copies everything readable from ``fd`` into ``path`` in a thread, within the cap."""

    def __init__(
        self, fd: int, path: Path, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES
    ) -> None:
        self.fd = fd
        self.path = path
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.written = 0
        self.dropped = 0
        self._tail = bytearray()
        self._thread = threading.Thread(target=self._copy, name="cudaforge-worker-log", daemon=True)

    def start(self) -> CappedLog:
        self._thread.start()
        return self

    def _copy(self) -> None:
        with open(self.path, "ab", buffering=0) as log:
            while True:
                try:
                    chunk = os.read(self.fd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                room = self.head_bytes - self.written
                if room > 0:
                    log.write(chunk[:room])
                    self.written += min(room, len(chunk))
                    chunk = chunk[room:]
                if chunk:
                    self._tail += chunk
                    if len(self._tail) > self.tail_bytes:
                        cut = len(self._tail) - self.tail_bytes
                        self.dropped += cut
                        del self._tail[:cut]
            if self._tail or self.dropped:
                log.write(f"\n[... {self.dropped} bytes of worker output dropped ...]\n".encode())
                log.write(bytes(self._tail))
        os.close(self.fd)

    def join(self, timeout: float | None = 10.0) -> None:
        """Wait until the output has ended (every writer gone) and the tail is written."""
        self._thread.join(timeout)
