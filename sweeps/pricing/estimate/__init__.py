"""How long a trial will take, before it runs: a cost model that imports pandas, numpy and scipy, not torch.

model = fit(runs_frame)  # the store's flat rows (tracking/store/history.py), one per finished run
seconds = [estimate(trial, model).seconds for trial in trials]
"""

from sweeps.pricing.estimate.cost import FIT, HISTORY, PRIOR, Estimate, estimate, fit  # noqa: F401
from sweeps.pricing.estimate.hardware import CpuSpeed, calibrate_cpu, cpu_speed, forget_cpu_speed  # noqa: F401
from sweeps.pricing.estimate.makespan import lpt_order, makespan  # noqa: F401
from sweeps.pricing.estimate.shapes import PRESET_SHAPES  # noqa: F401
