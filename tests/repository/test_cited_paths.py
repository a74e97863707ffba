"""Every repository path and dotted module name that the code's docstrings and comments, conf/ and the docs cite
exists: a file moved or renamed leaves no prose pointing at its old place.

A path is one into the repository's folders (`tokengen/decode/loop.py`, `conf/grid/`); a dotted name is one that
starts with a package of the repository (`sweeps.execution.execute.run_on_cluster`): its longest prefix that is a
module must exist, and the rest must be a name that module defines or imports. Placeholders (`<sweep>`) and
globs are read as such.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from pathlib import Path

from sweeps.planning.config import TrackingSettings

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("tokengen", "sweeps", "tracking", "benchmarks", "scripts", "tests")
PATH = re.compile(r"(?<![\w./-])(?:tokengen|sweeps|tracking|benchmarks|scripts|conf|docs|tests)/[\w./*<>-]*")
FILE_SUFFIXES = {"md", "py", "yaml", "csv", "json", "sh", "log", "db"}
SETTINGS = {f.name for f in dataclasses.fields(TrackingSettings)}  # tracking.uri, tracking.experiment
DOTTED = re.compile(r"(?<![\w./-])(?:tokengen|sweeps|tracking)(?:\.[A-Za-z_]\w*)+")


def prose_of(path: Path) -> str:
    """A Python file's docstrings and comments; a YAML, Markdown or shell file whole."""
    text = path.read_text()
    if path.suffix != ".py":
        return text
    parts = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            parts.append(ast.get_docstring(node) or "")
    return "\n".join(parts)


def missing_path(cited: str, root: Path) -> bool:
    cited = cited.rstrip(".,:;`'\")")
    if "<" in cited or not cited:
        return False
    return not (list(root.glob(cited)) if "*" in cited else (root / cited).exists())


def module_file(dotted: str, root: Path) -> Path | None:
    base = root / dotted.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def missing_name(cited: str, root: Path) -> bool:
    parts = cited.rstrip(".").split(".")
    if parts[-1] in FILE_SUFFIXES or parts[0] == "tracking" and parts[1:2] and parts[1] in SETTINGS:
        return False  # a file (`sweeps.md`), or a setting of the sweep's config (`tracking.uri`), not a module
    for cut in range(len(parts), 0, -1):
        found = module_file(".".join(parts[:cut]), root)
        if found is not None:
            rest = parts[cut:]
            return bool(rest) and not re.search(rf"\b{re.escape(rest[0])}\b", found.read_text())
    return True


def stale(root: Path) -> list[str]:
    files = [p for folder in FOLDERS for p in (root / folder).rglob("*.py")]
    files += [
        *root.glob("*.md"),
        *(root / "docs").glob("*.md"),
        *(root / "conf").rglob("*.yaml"),
        *(root / "scripts").rglob("*.sh"),
    ]
    found = []
    for path in sorted(files):
        text = prose_of(path)
        where = path.relative_to(root)
        found += [f"{where}: {p}" for p in sorted(set(PATH.findall(text))) if missing_path(p, root)]
        found += [f"{where}: {n}" for n in sorted(set(DOTTED.findall(text))) if missing_name(n, root)]
    return found


def test_every_cited_path_and_module_exists():
    assert stale(ROOT) == []


def test_the_rule_finds_a_made_up_path_and_module(tmp_path):
    (tmp_path / "tokengen").mkdir()
    (tmp_path / "tokengen" / "loop.py").write_text(
        '"""See tokengen/nowhere.py, tokengen.loop.run and '
        'tokengen.gone, and tokengen/<sweep>/x."""\ndef run():\n    pass\n'
    )
    assert stale(tmp_path) == ["tokengen/loop.py: tokengen/nowhere.py", "tokengen/loop.py: tokengen.gone"]
