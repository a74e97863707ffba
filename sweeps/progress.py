"""The live progress line while trials run: done, failed, running, ETA."""

from __future__ import annotations

import sys

from tqdm import tqdm


class Progress:
    def __init__(self, total: int):
        self.failed = 0
        self.running = 0
        self.bar = tqdm(total=total, desc="trials", unit="trial", file=sys.stderr, dynamic_ncols=True)
        self._show()

    def advance(self, failed: bool) -> None:
        self.failed += failed
        self.bar.update(1)
        self._show()

    def update(self, running: int) -> None:
        if running != self.running:
            self.running = running
            self._show()

    def _show(self) -> None:
        self.bar.set_postfix_str(f"done={self.bar.n - self.failed} failed={self.failed} running={self.running}")

    def close(self) -> None:
        self.bar.close()
