"""Two sweeps compared point by point: `python -m tracking.compare A B` (tracking/compare/__main__.py), read through
the report's reader, matched on the spec's knob and workload fields, each point given B/A with the report's 95%
interval and pyperf's verdict; what differed between the two environments comes first, before any number.
"""
