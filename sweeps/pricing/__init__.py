"""Pricing, the second stage: the cost model (estimate/), each planned trial's estimate, memory peaks and
the pools' workers, the budget guard, the order of submission and the dry run's tables. Imports only
planning of the stages."""
