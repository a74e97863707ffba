"""Named ranges in the decode loop ("step N", "forward", "stop check"), for a profiler to see.

NVTX ranges for Nsight Systems or `record_function` ranges for torch.profiler. With profiling off
the loop gets `NO_RANGES`, whose contexts are one shared `nullcontext`: benchmarks/ranges_cost.py
measures that this costs nothing. The profiler that opens and closes a window of steps around
them is tokengen.measure.profiler.window's.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from tokengen.contract.names import CHECK_RANGE, FORWARD_RANGE, STEP_RANGE

_NULL = nullcontext()


class NoRanges:
    def step(self, i: int):
        return _NULL

    def forward(self):
        return _NULL

    def check(self):
        return _NULL


class NvtxRanges(NoRanges):
    """For Nsight Systems (needs a CUDA build of torch)."""

    def step(self, i: int):
        return torch.cuda.nvtx.range(STEP_RANGE.format(i))

    def forward(self):
        return torch.cuda.nvtx.range(FORWARD_RANGE)

    def check(self):
        return torch.cuda.nvtx.range(CHECK_RANGE)


class TorchRanges(NoRanges):
    """For torch.profiler: user annotations on the host timeline (and projected on the GPU's)."""

    def step(self, i: int):
        return torch.profiler.record_function(STEP_RANGE.format(i))

    def forward(self):
        return torch.profiler.record_function(FORWARD_RANGE)

    def check(self):
        return torch.profiler.record_function(CHECK_RANGE)


NO_RANGES = NoRanges()


class RelayRanges(NoRanges):
    """Passes every range on to `inner`; a subclass changes what a step does (opens a profiling
    window, renumbers a segment's steps) and nothing else."""

    def __init__(self, inner: NoRanges):
        self.inner = inner

    def step(self, i: int):
        return self.inner.step(i)

    def forward(self):
        return self.inner.forward()

    def check(self):
        return self.inner.check()
