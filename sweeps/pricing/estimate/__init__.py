"""How long a trial will take, before it runs (pandas, numpy and scipy; no torch): fit the store's flat rows once
(tracking/store/history.py), then `estimate(trial, model)` for each trial."""

from sweeps.pricing.estimate.cost import FIT, HISTORY, PRIOR, Estimate, estimate, fit  # noqa: F401
from sweeps.pricing.estimate.hardware import CpuSpeed, calibrate_cpu, cpu_speed, forget_cpu_speed  # noqa: F401
from tokengen.contract.model_shapes import PRESET_SHAPES  # noqa: F401
