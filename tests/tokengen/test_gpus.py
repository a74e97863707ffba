"""One GPU table (tokengen/contract/machine/gpus.py): the cost model's prior and a trial's achieved
bandwidth read the same entry for a GPU, however CUDA or Ray spells its name."""

from __future__ import annotations

import pytest

from sweeps.pricing.estimate import hardware
from tokengen.contract.machine.gpus import GPUS, gpu_kind
from tokengen.measure.environment import peak_bandwidth_gbs


@pytest.mark.parametrize(
    "name, kind",
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA L40S", "L40S"),
    ],
)
def test_the_prior_and_the_record_read_one_entry_per_gpu(name, kind):
    assert gpu_kind(name) == hardware.gpu_kind(name) == kind
    assert peak_bandwidth_gbs(name) == hardware.gpu_spec(kind).bandwidth_gbs == GPUS[kind].bandwidth_gbs


def test_an_unknown_gpu_has_no_peak_and_keeps_its_name():
    assert peak_bandwidth_gbs("Tesla T4") is None and peak_bandwidth_gbs(None) is None
    assert gpu_kind(" Tesla T4 ") == "Tesla T4" and hardware.gpu_spec("Tesla T4") is None


def test_every_entry_is_whole():
    for kind, gpu in GPUS.items():
        assert gpu.memory_gb > 0 and gpu.bandwidth_gbs > 0, kind
        assert gpu.bf16_tflops >= gpu.tf32_tflops > 0 and gpu.fp32_tflops > 0, kind
    assert hardware.DEFAULT_GPU in GPUS and hardware.GPUS is GPUS and hardware.Gpu is type(GPUS["H200"])
