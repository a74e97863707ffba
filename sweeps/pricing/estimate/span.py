"""A value with a low and a high, which each part of an estimate carries: lows add to lows, highs to highs (a wide
range keeps a scheduler from under-booking a worker)."""

from __future__ import annotations

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
        """value / factor .. value x factor: for quantities known to a ratio."""
        return cls(value, value / factor, value * factor)

    def __add__(self, other: "Span") -> "Span":  # type: ignore[override]
        return Span(self.mid + other.mid, self.low + other.low, self.high + other.high)

    def times_span(self, other: "Span") -> "Span":
        """Product of two non-negative spans (a run's time x a number of runs)."""
        return Span(self.mid * other.mid, self.low * other.low, self.high * other.high)
