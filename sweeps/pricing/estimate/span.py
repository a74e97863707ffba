"""A value with a low and a high: each part of an estimate carries its own, and they add up.

Adding lows to lows and highs to highs treats the parts' errors as moving together: a wider range
than independent errors would give, which suits a scheduler that must not under-book a worker.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class Span(NamedTuple):
    mid: float
    low: float
    high: float

    @classmethod
    def exact(cls, value: float) -> "Span":
        return cls(value, value, value)

    @classmethod
    def factor(cls, value: float, factor: float) -> "Span":
        """value / factor .. value x factor: a multiplicative range, for quantities known to a ratio."""
        return cls(value, value / factor, value * factor)

    @classmethod
    def log_sigma(cls, value: float, sigma: float, z: float = 2.0) -> "Span":
        """About a 95% range for a value whose log-error has robust spread `sigma`."""
        return cls.factor(value, math.exp(z * sigma))

    def __add__(self, other: "Span") -> "Span":  # type: ignore[override]
        return Span(self.mid + other.mid, self.low + other.low, self.high + other.high)

    def times(self, k: float) -> "Span":
        return Span(self.mid * k, self.low * k, self.high * k)

    def times_span(self, other: "Span") -> "Span":
        """Product of two non-negative spans (e.g. a run's time x a number of runs)."""
        return Span(self.mid * other.mid, self.low * other.low, self.high * other.high)


ZERO = Span(0.0, 0.0, 0.0)
