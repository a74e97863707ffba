"""Facts read from the GPU for the record, on the CPU: NVML's energy counter and the live allocator.

No GPU here, so NVML and torch's memory snapshot are stand-ins. For the meter: its arithmetic,
that it asks NVML for the GPU at torch's device address (not NVML's index, which
CUDA_VISIBLE_DEVICES does not remap), and that a GPU without the counter gives None rather than
an error. For the allocator: that the verdict comes from the segments the allocator holds.
(tests/tokengen/test_gpu.py checks both on a real GPU.)
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from tokengen.measure import energy, memory
from tokengen.measure.energy import EnergyMeter

ADDRESS = "00000000:3b:00.0"


def fake_nvml(readings: list[int] | None) -> types.ModuleType:
    """pynvml with one GPU at ADDRESS whose counter reads `readings` in turn (None: NotSupported)."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    def handle_by_bus_id(address: bytes):
        assert address.decode() == ADDRESS, f"asked NVML for {address!r}, torch's device is at {ADDRESS}"
        return "handle"

    def total_energy(handle) -> int:
        if readings is None:
            raise NVMLError_NotSupported()
        return readings.pop(0)

    nvml.NVMLError, nvml.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetHandleByPciBusId = handle_by_bus_id
    nvml.nvmlDeviceGetTotalEnergyConsumption = total_energy
    return nvml


@pytest.fixture
def pretend_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(energy, "pci_bus_id", lambda index: ADDRESS)


def test_a_cpu_trial_has_no_energy_figure():
    meter = EnergyMeter("cpu")
    meter.start()
    assert not meter.available and meter.stop() is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_cuda_without_a_gpu_has_no_energy_figure():
    meter = EnergyMeter("cuda")
    meter.start()
    assert meter.stop() is None


def test_without_pynvml_the_meter_says_none(pretend_cuda, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    meter = EnergyMeter("cuda")
    meter.start()
    assert not meter.available and meter.stop() is None


def test_the_meter_reports_joules_between_start_and_stop(pretend_cuda, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([5_000, 10_000, 12_500]))  # probe, start, stop (mJ)
    meter = EnergyMeter("cuda")
    meter.start()
    assert meter.available and meter.stop() == pytest.approx(2.5)


def test_a_gpu_without_the_counter_gives_none(pretend_cuda, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(None))
    meter = EnergyMeter("cuda")
    meter.start()
    assert not meter.available and meter.stop() is None


def test_stop_before_start_gives_none(pretend_cuda, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([1_000, 2_000]))
    assert EnergyMeter("cuda").stop() is None


def test_no_allocator_to_report_on_the_cpu():
    assert memory.live_allocator_setting("cpu") is None and memory.live_allocator_tag("cpu") is None


@pytest.mark.parametrize(
    "segments, verdict",
    [
        ([{"device": 0, "is_expandable": True}, {"device": 0, "is_expandable": False}], True),  # a graph pool is not
        ([{"device": 0, "is_expandable": False}, {"device": 1, "is_expandable": True}], False),  # another GPU's
        ([], None),  # nothing allocated: nothing to judge by
    ],
)
def test_the_allocator_verdict_comes_from_its_segments(monkeypatch, segments, verdict):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda.memory, "get_allocator_backend", lambda: "native")
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: {"segments": segments})
    setting = memory.live_allocator_setting("cuda")
    assert setting["expandable_segments"] is verdict and setting["backend"] == "native"
    assert f"expandable_segments={verdict} " in memory.live_allocator_tag("cuda")
