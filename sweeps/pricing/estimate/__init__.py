"""How long a trial will take, before it runs: a torch-free cost model for scheduling sweeps.

    from sweeps.pricing.estimate import estimate, fit, makespan
    model = fit(runs_frame)                     # the store's flat rows (tracking/store/history.py), one per finished run
    plan = [estimate(trial, model) for trial in trials]
    makespan(plan, workers=8).seconds

Only pandas, numpy and scipy: a driver can size a sweep without importing torch.
"""

from sweeps.pricing.estimate.cost import FIT, HISTORY, PRIOR, Estimate, estimate, fit, prior
from sweeps.pricing.estimate.hardware import GPUS, CpuSpeed, calibrate_cpu, cpu_speed, forget_cpu_speed
from sweeps.pricing.estimate.laws import StepLaw
from sweeps.pricing.estimate.makespan import Schedule, lpt_order, makespan
from sweeps.pricing.estimate.model import CostModel
from sweeps.pricing.estimate.shapes import PRESET_SHAPES, ModelShape, shape_of

__all__ = [
    "Estimate",
    "estimate",
    "fit",
    "prior",
    "HISTORY",
    "FIT",
    "PRIOR",
    "CostModel",
    "StepLaw",
    "CpuSpeed",
    "calibrate_cpu",
    "cpu_speed",
    "forget_cpu_speed",
    "GPUS",
    "Schedule",
    "lpt_order",
    "makespan",
    "ModelShape",
    "PRESET_SHAPES",
    "shape_of",
]
