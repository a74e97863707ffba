"""A knob is named in one place: no hand-written list of knob names, no knob value spelled outside its two files.

Every list of knobs (which rows a report pairs, what a price is keyed on, what the terminal table shows) and every
setting of several knobs (a preset's) is derived from tokengen/contract/declarations.py; a literal tuple, list or
set of two or more knob names, or a dict literal (or `dict(...)` call) keyed by two or more, anywhere else in
tokengen/, sweeps/, tracking/ or benchmarks/ is a list or a setting that a new knob would silently miss. And each of
the newer knobs' values is spelled only in its declaration and its implementation, so a report, a price or a
benchmark that wants them asks the declarations.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tokengen.contract.declarations import KNOBS, declared, names, plain

ROOT = Path(__file__).resolve().parents[2]
DECLARATIONS = ROOT / "tokengen" / "contract" / "declarations.py"


def _knob_words(node: ast.AST) -> list[str]:
    """The knob names a literal collection holds, a dict literal is keyed by, or a `dict(...)` call names."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = node.elts
    elif isinstance(node, ast.Dict):
        items = [key for key in node.keys if key is not None]  # None: a `**spread`
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return [k.arg for k in node.keywords if k.arg in KNOBS]
    else:
        return []
    return [e.value for e in items if isinstance(e, ast.Constant) and e.value in KNOBS]


def knob_lists(root: Path, packages=("tokengen", "sweeps", "tracking", "benchmarks")) -> list[str]:
    """`path:line` of every literal list of two or more knob names, or setting keyed by them, outside the
    declarations."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if path == root / DECLARATIONS.relative_to(ROOT):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                words = _knob_words(node)
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


def test_the_newer_knobs_and_the_engines_values_are_spelled_in_their_declaration_and_implementation_only():
    """An engine's facts (a transformers peer, greedy only, what it requires, its overhead) are declared: no rule,
    price or report names an engine."""
    for knob in ("quant", "attention", "engine"):
        words = {name for name in names(knob) if name != plain(knob).name}
        paths = {getattr(declared(knob, name), part) for name in words for part in ("impl", "server")}
        impls = {path.partition(":")[0].replace(".", "/") + ".py" for path in paths if path}
        assert spelled(ROOT, knob, words) <= {str(DECLARATIONS.relative_to(ROOT)), *impls}, knob


def test_the_rules_find_a_knob_list_and_a_stray_value(tmp_path):
    package = tmp_path / "tracking"
    package.mkdir()
    (package / "table.py").write_text('SAME = ["cache", "compile"]\nONE = ("cache",)\nPROSE = "int8 rows"\n')
    (package / "price.py").write_text('BITS = {"int8": 8}\n')
    (package / "report.py").write_text('ROWS = "quant=int8 rows"\n')
    assert knob_lists(tmp_path) == ["tracking/table.py:1 ['cache', 'compile']"]
    assert spelled(tmp_path, "quant", {"int8"}) == {"tracking/price.py", "tracking/report.py"}


def test_the_rules_find_a_setting_keyed_by_knob_names_in_a_benchmark_too(tmp_path):
    """A preset written as a dict literal (or a dict(...) call) keyed by two knobs is a setting a new knob would
    miss; one knob as a key, a spread of declared settings, or a dict keyed by other words is none."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "presets.py").write_text(
        'FAST = {**PLAIN, "cache": "static", "compile": "default"}\n'
        'SLOW = dict(cache="none", stop_check="sync")\n'
        'ONE = {"cache": "static"}\nOTHER = {"model": "tiny", "device": "cpu"}\nSPREAD = {**PLAIN, **FAST}\n'
    )
    assert knob_lists(tmp_path) == [
        "benchmarks/presets.py:1 ['cache', 'compile']",
        "benchmarks/presets.py:2 ['cache', 'stop_check']",
    ]
