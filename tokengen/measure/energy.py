"""Joules the GPU drew over an interval, from NVML's total-energy counter; None wherever it is absent.

Optional, as docs/design.md wants every extra measurement: `pynvml` (package nvidia-ml-py, extra
`energy`) is imported only when a CUDA meter is made, and a CPU trial, a machine without it, or a
GPU without the counter (nvmlDeviceGetTotalEnergyConsumption says NotSupported) gets None.

The counter is in millijoules since the driver loaded, for the whole board, and it updates every
few tens of milliseconds: meter an interval that spans many runs, after the device has drained.

    meter = EnergyMeter(spec.device)
    meter.start()
    ...                                   # timed runs, synchronized
    joules = meter.stop()                 # float, or None
"""

from __future__ import annotations

from typing import Callable

import torch

MillijouleCounter = Callable[[], "int | None"]


def pci_bus_id(index: int) -> str | None:
    """The CUDA device's PCI address in NVML's form, or None where torch does not report it.

    NVML numbers every GPU of the machine in PCI order; CUDA numbers the visible ones only
    (CUDA_VISIBLE_DEVICES), fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID: the address is
    the one name both agree on.
    """
    props = torch.cuda.get_device_properties(index)
    bus, device = getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None)
    if bus is None or device is None:
        return None
    return f"{getattr(props, 'pci_domain_id', 0) or 0:08x}:{bus:02x}:{device:02x}.0"


def _nvml_handle(pynvml, index: int):
    address = pci_bus_id(index)
    if address is not None:
        return pynvml.nvmlDeviceGetHandleByPciBusId(address.encode())
    return pynvml.nvmlDeviceGetHandleByIndex(torch.cuda._get_nvml_device_index(index))  # honours CUDA_VISIBLE_DEVICES


def nvml_device_handle():
    """NVML's handle of the GPU this process computes on, found as the energy counter finds it (the
    interference Watch calls it after nvmlInit, for its GPU processes, clocks and throttle reasons)."""
    import pynvml

    return _nvml_handle(pynvml, torch.cuda.current_device())


def nvml_energy_counter(device: str) -> MillijouleCounter | None:
    """A reader of the millijoule counter of the GPU this process computes on, or None."""
    if device != "cuda" or not torch.cuda.is_available():
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = _nvml_handle(pynvml, torch.cuda.current_device())
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # raises NVMLError_NotSupported without a counter
    except pynvml.NVMLError:
        return None

    def read() -> int | None:
        try:
            return pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except pynvml.NVMLError:  # a counter that fails mid-trial costs the figure, not the trial
            return None

    return read


class EnergyMeter:
    """start() then stop(): joules in between, or None where there is no counter."""

    def __init__(self, device: str):
        self.counter = nvml_energy_counter(device)
        self.started_mj: int | None = None

    @property
    def available(self) -> bool:
        return self.counter is not None

    def start(self) -> None:
        self.started_mj = self.counter() if self.counter else None

    def stop(self) -> float | None:
        ended_mj = self.counter() if self.counter else None
        if ended_mj is None or self.started_mj is None:
            return None
        return (ended_mj - self.started_mj) / 1e3
