"""The live progress line while trials run: done, failed, running, ETA, and results waiting for MLflow."""

from __future__ import annotations

import sys

from tqdm import tqdm


class Progress:
    def __init__(self, total: int):
        self.failed = 0
        self.running = 0
        self.unrecorded = 0  # results in the journal that the tracking store has not taken yet
        self.bar = tqdm(total=total, desc="trials", unit="trial", file=sys.stderr, dynamic_ncols=True)
        self._show()

    def advance(self, failed: bool, unrecorded: int = 0) -> None:
        self.failed += failed
        self.unrecorded = unrecorded
        self.bar.update(1)
        self._show()

    def update(self, running: int, unrecorded: int | None = None) -> None:
        unrecorded = self.unrecorded if unrecorded is None else unrecorded
        if (running, unrecorded) != (self.running, self.unrecorded):
            self.running, self.unrecorded = running, unrecorded
            self._show()

    def _show(self) -> None:
        waiting = (
            f" unrecorded={self.unrecorded} (waiting in the journal for the tracking store)" if self.unrecorded else ""
        )
        self.bar.set_postfix_str(
            f"done={self.bar.n - self.failed} failed={self.failed} running={self.running}{waiting}"
        )

    def close(self) -> None:
        self.bar.close()
