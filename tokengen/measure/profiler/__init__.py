"""Profiling a trial: the profiled run with its window of steps (run), and a trace reduced to three
numbers (traces)."""
