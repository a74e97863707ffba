"""stop_check=every_k: the host reads the finished flag every K-th step only, K times fewer waits.

The sync check waits for the device after every step; this one lets K steps queue up, then waits
once. It still returns sync's step count: each step's flag stays on the device, and when the K-th
one says the batch has ended, the earlier flags of the window (already computed, so reading them
waits for nothing) find the step it ended at. The up to K-1 steps run past that end only write
padding, which the generator slices off with the step count: the same tokens as sync.
"""

from __future__ import annotations

from tokengen.decode.ranges import NO_RANGES, NoRanges

K = 4
"""Steps between two waits: the declaration's overrun is K - 1."""


def every_k_check(step, all_finished, max_steps: int, ranges: NoRanges = NO_RANGES, *, device=None, k: int = K) -> int:
    """Enqueue K steps, keeping each one's finished flag, then wait on the last; `device` is unused
    (the flags are the loop's own device scalars)."""
    window = []  # the flags of the steps since the last wait
    for i in range(max_steps):
        with ranges.step(i):
            step(i)
            window.append(all_finished())
            if len(window) < k and i < max_steps - 1:
                continue
            with ranges.check():
                if window[-1].item():
                    ended = next(j for j, flag in enumerate(window) if flag.item())  # the first step that ended it
                    return i - len(window) + 1 + ended + 1
            window = []
    return max_steps
