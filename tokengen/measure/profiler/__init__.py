"""Profiling a trial: the profiled run with its window of steps (run), the trial under Nsight Systems (nsys) and
its report converted and summarized (nsys_report), and a trace reduced to three numbers (traces)."""
