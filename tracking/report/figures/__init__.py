"""What a report's numbers mean: the baseline each trial is compared with, the interval around a
speedup, whether two trials' tokens agree, and the figures written back onto the runs."""
