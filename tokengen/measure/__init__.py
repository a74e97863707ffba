"""Measuring one trial: clocks, memory, energy, the allocator, the environment, the token checksum,
profiling and traces; tokengen.measure.trial runs a trial and returns its record."""
