"""stop_check=every_k waits for the device K times less often than sync, and returns what sync returns.

Its tokens and step count against sync's are tests/tokengen/test_stop_checks.py's (the simulated GPU, every
declared check) and tests/tokengen/test_equivalence.py's (real models, rows ending apart, 14 steps: not a
multiple of K); here, on the simulated GPU that runs only when waited for, the waits themselves.
"""

from __future__ import annotations

import math

import pytest
from test_stop_checks import DeviceBool, SimDecode, SimGpu

from tokengen.contract.declarations import declared
from tokengen.decode.every_k import K, every_k_check
from tokengen.decode.ranges import NO_RANGES
from tokengen.decode.stop_checks import sync_check


def waits(check, targets: list[int], max_steps: int, monkeypatch) -> tuple[int, int]:
    """(host waits that found device work pending, steps returned) for one generation."""
    count = 0
    item = DeviceBool.item

    def counted(flag: DeviceBool) -> bool:
        nonlocal count
        count += flag.stream.done < len(flag.stream.ops)  # the host had to wait for the device
        return item(flag)

    monkeypatch.setattr(DeviceBool, "item", counted)
    gpu = SimGpu("lagging")
    decode = SimDecode(gpu, targets, max_steps)
    steps = check(decode.step, decode.all_finished, max_steps, NO_RANGES, device=gpu)
    return count, steps


@pytest.mark.parametrize("targets, max_steps", [([30, 40], 22), ([3, 9, 5], 30), ([1, 2], 7)])
def test_every_k_waits_once_per_k_steps_where_sync_waits_every_step(targets, max_steps, monkeypatch):
    sync_waits, sync_steps = waits(sync_check, targets, max_steps, monkeypatch)
    k_waits, k_steps = waits(every_k_check, targets, max_steps, monkeypatch)
    assert k_steps == sync_steps == min(max(targets), max_steps)
    assert sync_waits == sync_steps
    assert k_waits == math.ceil(sync_steps / K), (k_waits, sync_steps)


def test_the_declared_overrun_is_the_window_less_one():
    """The report and the harness trust the declaration: K steps a window, so up to K - 1 past the end."""
    assert declared("stop_check", "every_k").overrun == K - 1 and K > 1
