"""Measuring one trial: clocks, memory, energy, the allocator, the environment, the token checksum,
and the profiler (tokengen.measure.profiler); tokengen.measure.trial runs a trial and returns its record."""
