"""A knob is named in one place: no hand-written list of knob names, no knob value spelled outside its two files.

Every list of knobs (which rows a report pairs, what a price is keyed on, what the terminal table shows) is derived
from tokengen/contract/declarations.py; a literal tuple or list of two or more knob names anywhere else in
tokengen/, sweeps/ or tracking/ is a list that a new knob would silently miss. And each of the newer knobs'
values is spelled only in its declaration and its implementation, so a report, a price or a benchmark that
wants them asks the declarations.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tokengen.contract.declarations import KNOBS, declared, names, plain

ROOT = Path(__file__).resolve().parents[2]
DECLARATIONS = ROOT / "tokengen" / "contract" / "declarations.py"


def knob_lists(root: Path, packages=("tokengen", "sweeps", "tracking")) -> list[str]:
    """`path:line` of every literal tuple, list or set of two or more knob names outside the declarations."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if path == root / DECLARATIONS.relative_to(ROOT):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    words = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in KNOBS]
                    if len(words) >= 2:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {words}")
    return found


def spelled(
    root: Path, knob: str, words: set[str], folders=("tokengen", "sweeps", "tracking", "benchmarks", "scripts")
) -> set[str]:
    """The source files where one of a knob's values is a string literal, or `knob=value` is part of one
    (prose that uses the same word, "the same math", is no value)."""
    files = set()
    for folder in folders:
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if node.value in words or any(f"{knob}={word}" in node.value for word in words):
                        files.add(str(path.relative_to(root)))
                        break
    return files


def test_no_hand_written_list_of_knob_names():
    assert knob_lists(ROOT) == []


def test_the_newer_knobs_values_are_spelled_in_their_declaration_and_implementation_only():
    for knob in ("quant", "attention"):
        words = {name for name in names(knob) if name != plain(knob).name}
        impls = {declared(knob, name).impl.partition(":")[0].replace(".", "/") + ".py" for name in words}
        assert spelled(ROOT, knob, words) <= {str(DECLARATIONS.relative_to(ROOT)), *impls}, knob


def test_the_rules_find_a_knob_list_and_a_stray_value(tmp_path):
    package = tmp_path / "tracking"
    package.mkdir()
    (package / "table.py").write_text('SAME = ["cache", "compile"]\nONE = ("cache",)\nPROSE = "int8 rows"\n')
    (package / "price.py").write_text('BITS = {"int8": 8}\n')
    (package / "report.py").write_text('ROWS = "quant=int8 rows"\n')
    assert knob_lists(tmp_path) == ["tracking/table.py:1 ['cache', 'compile']"]
    assert spelled(tmp_path, "quant", {"int8"}) == {"tracking/price.py", "tracking/report.py"}
