"""One mark for a number that may be wrong, wherever a report shows it.

A figure carries MARK (tracking/measurement.py) when the trial it comes from was judged noisy or contended,
and so does every figure derived from it (a speedup, a gain, an overhead, a growth exponent, a cost per
token) or from its partner (a baseline, a twin, a peer); a speedup carries it too where the trial's tokens
are below the fidelity gate or checked against nothing (`unchecked`). A table keeps its numbers as numbers
and names its marked cells in `attrs["marks"]` (column -> one flag per row, in the table's order); the
Markdown writer (tracking/report/markdown.py) prints the mark after the cell, and the report adds the
legend under every table that has one.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from tracking.measurement import MARK  # noqa: F401 - the glyph, named once

MARKS = "marks"  # the attrs key


def _flag(value) -> bool:
    return not _missing(value) and bool(value)  # no trial behind the cell: no mark


def flags(values: Iterable) -> list[bool]:
    """Python booleans, from bools, numpy's, or a pivot's 1.0, 0.0 and NaN."""
    return [_flag(v) for v in values]


def either(*columns: Iterable) -> list[bool]:
    """A derived figure's flags: marked where any of the figures it comes from is."""
    return [any(row) for row in zip(*(flags(c) for c in columns))]


def mark(table: pd.DataFrame, column: str, marked: Iterable) -> pd.DataFrame:
    """Names the cells of `column` to print with the mark (one flag per row, in the table's order); a cell
    with no figure (n/a) carries none."""
    if column not in table:
        return table
    found = [f and not _missing(v) for f, v in zip(flags(marked), table[column].tolist())]
    if any(found):
        table.attrs.setdefault(MARKS, {})[column] = found
    return table


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def is_marked(table: pd.DataFrame | None) -> bool:
    """Whether any cell of the table carries the mark (its legend is printed under it)."""
    return table is not None and any(any(f) for f in table.attrs.get(MARKS, {}).values())


def marked_cells(table: pd.DataFrame, column: str) -> list[bool]:
    """The column's flags, all False where none is marked."""
    return table.attrs.get(MARKS, {}).get(column) or [False] * len(table)
