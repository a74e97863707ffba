"""Two sweeps compared point by point: `python -m tracking.compare A B` (tracking/compare/__main__.py).

The same grid run on two GPU types, before and after an upgrade, or from two checkouts: each sweep
is read back through the report's reader (tracking/store/reading.py), their finished trials are matched on
the spec's knob and workload fields, and each matched point gets B/A with the report's 95% interval
(tracking/report/figures/intervals.py) and pyperf's verdict. What differed between the two environments comes
first, before any number, since a ratio means little until one knows what changed.

- `sides.py`: naming and loading the two sweeps; what differs between their environments and settings
- `points.py`: matching the points; ratio, interval, verdict, tokens, cost and energy per point
- `overview.py`: the geometric mean per variant, ranking changes, the points on one side only
- `render.py`: the Markdown; `plot.py`: the ratio plot; `record.py`: the comparison's MLflow runs
"""
