"""What each GPU type can do, one entry per type: the datasheet table every part of the project reads.

The cost model's prior prices a step by its bandwidth and peaks (sweeps/pricing/estimate/hardware.py), and a
trial reports its achieved weight streaming against the bandwidth (tokengen/measure/environment.py).
Torch-free, so the sweep's driver and the trial name a GPU the same way: `gpu_kind` maps a name as
CUDA (env_gpu_name) or Ray (accelerator_type) spells it to its entry.

Sources: NVIDIA datasheets, dense figures (the "with sparsity" numbers are halved). L40S (2023): 48 GB
GDDR6 at 864 GB/s, BF16 362.05 dense (733 sparse), TF32 183, FP32 91.6. A100 SXM4: 80 GB HBM2e at
2039 GB/s (the 40 GB part: 1555 GB/s), BF16 312, TF32 156, FP32 19.5. H100 SXM5: 80 GB HBM3 at
3.35 TB/s, BF16 989 dense (1979 sparse), TF32 494.5, FP32 67; H100 PCIe: 80 GB at 2.0 TB/s, 756 / 378 /
51; H100 NVL: 94 GB at 3.9 TB/s, 835 / 417.5 / 60. H200 SXM: 141 GB HBM3e at 4.8 TB/s, H100 SXM's
compute. GH200: 96 GB HBM3 at 4.0 TB/s, H100 SXM's compute.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    name: str
    bandwidth_gbs: float  # datasheet memory bandwidth
    bf16_tflops: float  # dense BF16/FP16 tensor-core peak
    tf32_tflops: float  # dense TF32 tensor-core peak (float32 with matmul_precision=high)
    fp32_tflops: float  # non-tensor FP32 peak (float32 with matmul_precision=highest)
    memory_gb: float  # device memory, as the datasheet gives it (decimal GB)
    list_usd_per_hour: float | None = None  # price class: an example on-demand list price (2026), not a quote


GPUS: dict[str, Gpu] = {
    "L40S": Gpu("L40S", 864.0, 362.05, 183.0, 91.6, memory_gb=48, list_usd_per_hour=1.86),
    "A100": Gpu("A100 80GB SXM", 2039.0, 312.0, 156.0, 19.5, memory_gb=80),
    "A100 40GB": Gpu("A100 40GB SXM", 1555.0, 312.0, 156.0, 19.5, memory_gb=40),
    "H100": Gpu("H100 SXM", 3350.0, 989.0, 494.5, 67.0, memory_gb=80, list_usd_per_hour=4.76),
    "H100 PCIe": Gpu("H100 PCIe", 2000.0, 756.0, 378.0, 51.0, memory_gb=80),
    "H100 NVL": Gpu("H100 NVL", 3900.0, 835.0, 417.5, 60.0, memory_gb=94),
    "H200": Gpu("H200 SXM", 4800.0, 989.0, 494.5, 67.0, memory_gb=141, list_usd_per_hour=6.08),
    "GH200": Gpu("GH200", 4000.0, 989.0, 494.5, 67.0, memory_gb=96),
}
"""GPU type (the key a sweep pins and a report groups by) -> what it can do."""

CPU_LIST_USD_PER_HOUR = 0.10  # a CPU worker's example price, beside the GPUs' price classes


def list_prices() -> dict[str, float]:
    """The example prices per device-hour that `sweep.prices` defaults to: cpu and every GPU with a price class."""
    return {
        "cpu": CPU_LIST_USD_PER_HOUR,
        **{kind: gpu.list_usd_per_hour for kind, gpu in GPUS.items() if gpu.list_usd_per_hour is not None},
    }


MARKERS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("GH200",), "GH200"),
    (("H200",), "H200"),
    (("H100", "NVL"), "H100 NVL"),
    (("H100", "PCIE"), "H100 PCIe"),
    (("H100",), "H100"),
    (("A100", "40G"), "A100 40GB"),
    (("A100",), "A100"),
    (("L40S",), "L40S"),
)
"""(substrings that must all appear in the upper-cased name, GPUS key): most specific first, so
"NVIDIA GH200 480GB" is not taken for an H200, nor "NVIDIA H100 PCIe" for an SXM part."""


@functools.lru_cache(maxsize=1024)  # a grid's pricing asks once per trial, of a few names
def gpu_kind(name) -> str | None:
    """The GPUS key for a GPU name as CUDA or Ray spells it; an unknown name comes back as given
    (stripped), None or blank as None."""
    if not isinstance(name, str) or not name.strip():
        return None
    upper = name.upper()
    for parts, key in MARKERS:
        if all(p in upper for p in parts):
            return key
    return name.strip()


def gpu_spec(kind: str | None) -> Gpu | None:
    """The entry of a GPUS key; None for an unknown type or none."""
    return GPUS.get(kind) if kind else None


def gpu_of(name: str | None) -> Gpu | None:
    """The entry of a GPU name as CUDA or Ray spells it (`NVIDIA H100 80GB HBM3`); None if unknown."""
    return gpu_spec(gpu_kind(name))


def price_per_hour(prices: dict, device_type: str | None) -> float | None:
    """USD per device-hour from a sweep's `sweep.prices` for a device type (cpu, a GPU type, or a GPU's
    full name): its own key, else the longest key its name contains (H100 in 'NVIDIA H100 80GB HBM3');
    None if none. The one look-up the pricing and the report's cost columns share."""
    if not isinstance(device_type, str):
        return None
    if device_type in prices:
        return float(prices[device_type])
    for name in sorted(prices, key=len, reverse=True):
        if name != "cpu" and name.lower() in device_type.lower():
            return float(prices[name])
    return None
