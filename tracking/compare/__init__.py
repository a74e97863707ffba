"""`python -m tracking.compare A B`: two sweeps compared point by point (tracking/compare/__main__.py)."""
