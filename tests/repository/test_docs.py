"""The docs say what the repository holds: every file, link and module they cite exists, the README's
grid table counts what each grid expands to, its test command is CI's, and its exit codes are the
driver's. Fast: Markdown and Hydra composition only, no trial runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from sweeps.planning.config import load_config, register
from sweeps.planning.grid import plan_sweep

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted([README, *(ROOT / "docs").glob("*.md")])
register()

# a path into one of the repository's folders, as prose cites it: `tokengen/decode/loop.py`, `conf/grid/`
PATH = re.compile(r"(?<![\w./-])(?:tokengen|sweeps|tracking|benchmarks|scripts|conf|docs|tests)/[\w./*<>-]*")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MODULE = re.compile(r"python -m ([\w.]+)")
SCRIPT = re.compile(r"python3? ((?:benchmarks|scripts)/[\w./-]+\.py)")


def _cited_paths(text: str) -> list[str]:
    return sorted({match.rstrip(".,:;") for match in PATH.findall(text)})


def _missing_paths(text: str) -> list[str]:
    missing = []
    for path in _cited_paths(text):
        if "<" in path:  # a placeholder (`<workdir>/<sweep>`), not a file of the repository
            continue
        found = list(ROOT.glob(path)) if "*" in path else [ROOT / path] if (ROOT / path).exists() else []
        if not found:
            missing.append(path)
    return missing


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    return broken


def _module_exists(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()


def _tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of stripped cells, header first, the |---| rule left out."""
    tables, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _table(text: str, *header: str) -> list[list[str]]:
    """The body of the one table whose header starts with `header` (case-insensitive)."""
    found = [t for t in _tables(text) if [c.lower() for c in t[0][: len(header)]] == list(header)]
    assert len(found) == 1, f"expected one table with header {header}, found {len(found)}"
    return found[0][1:]


def readme_grid_counts(text: str) -> dict[str, int]:
    """The README's grid table as {grid: trials}: first column the name in backticks, second the count."""
    counts = {}
    for row in _table(text, "grid", "trials"):
        name = re.fullmatch(r"`([\w-]+)`", row[0])
        assert name, f"grid table row {row[0]!r}: the first column is the grid's name in backticks"
        counts[name.group(1)] = int(row[1].replace(",", ""))
    return counts


def expanded_count(grid: str) -> int:
    """How many trials `python -m sweeps.run +grid=GRID` plans, composed as the driver composes it."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        config = load_config(compose("config", overrides=[f"+grid={grid}"]))
    return len(plan_sweep(config).trials)  # a peak search's grid: its first round


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_cited_path_exists(page):
    assert _cited_paths(page.read_text()), f"{page.name} cites no file: is the pattern still right?"
    assert _missing_paths(page.read_text()) == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    assert _broken_links(page) == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_names_a_real_module_or_script(page):
    text = page.read_text()
    assert [m for m in MODULE.findall(text) if m not in ("venv", "pytest") and not _module_exists(m)] == []
    assert [s for s in SCRIPT.findall(text) if not (ROOT / s).is_file()] == []


def test_the_readme_grid_table_counts_what_each_grid_expands_to():
    table = readme_grid_counts(README.read_text())
    grids = sorted(p.stem for p in (ROOT / "conf" / "grid").glob("*.yaml"))
    assert sorted(table) == grids, "the README's grid table lists every conf/grid/*.yaml, and nothing else"
    assert table == {grid: expanded_count(grid) for grid in grids}


def test_the_readme_install_and_test_commands_are_the_ones_ci_runs():
    """Two lines, each its own block: a newcomer who copies the install line installs, and waits for no test."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    install = [line for line in lines if "pip install" in line and not line.lstrip().startswith("#")]
    test = [line for line in lines if "pytest" in line and not line.lstrip().startswith("#")]
    assert len(install) == 1 and len(test) == 1 and install != test
    assert "pytest" not in install[0] and "ruff" not in install[0]
    for command in (install[0], test[0]):
        assert f"```bash\n{command.strip()}\n```" in README.read_text()


def test_the_readme_exit_codes_are_the_drivers():
    from sweeps.driver import BAD_INPUT, FAILED_TRIALS, UNRECORDED

    rows = {int(row[0]): row[1].lower() for row in _table(README.read_text(), "code", "meaning")}
    assert sorted(rows) == [0, FAILED_TRIALS, BAD_INPUT, UNRECORDED] == [0, 1, 2, 3]
    assert "failed" in rows[FAILED_TRIALS] and "bad input" in rows[BAD_INPUT] and "journal" in rows[UNRECORDED]


def test_the_checks_can_fail():
    """Each check, given a known-wrong input, says so (a test that cannot fail proves nothing)."""
    assert _missing_paths("see `tokengen/generate.py` and `conf/grid/nothing.yaml`") == [
        "conf/grid/nothing.yaml",
        "tokengen/generate.py",
    ]
    assert _missing_paths("`conf/grid/*.yaml`, `<workdir>/<sweep>`, `tokengen/decode/loop.py`.") == []
    assert not _module_exists("tokengen.generate") and _module_exists("sweeps.run")
    assert readme_grid_counts("| grid | trials | what |\n|---|---:|---|\n| `smoke` | 17 | x |\n") == {"smoke": 17}
    assert _slug("Profiling: the idle gap, as numbers") == "profiling-the-idle-gap-as-numbers"
    assert _slug("`python -m tracking.report`") == "python--m-trackingreport"


FIGURE = re.compile(r"(?<![\w.+-])\d[\d,]*(?:\.\d+)?(?:x|%)|(?<![\w.+-])\d[\d,]*\.\d+(?![\w.])")
"""A measured figure: a decimal, a ratio (`8.35x`) or a share (`88.4%`); whole numbers (counts, codes) are not."""


def readme_figures(text: str) -> list[str]:
    """The figures the README's prose and tables state, code blocks and version strings left out."""
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    prose = re.sub(r"\b(?:Python|torch|transformers|version)\s+[\d.]+\S*|\d+\.\d+\.\d+\S*", "", prose)
    return sorted(set(FIGURE.findall(prose)))


def test_the_readme_is_short_and_states_no_figure_results_md_does_not():
    text = README.read_text()
    assert len(text.splitlines()) <= 90
    results = (ROOT / "docs" / "results.md").read_text()
    assert [f for f in readme_figures(text) if f not in results] == []


def test_the_figure_check_can_fail():
    assert readme_figures(
        "Python 3.11, torch 2.11.0+cu130: 8.35x in 0.1557 s, 88.4% busy, 16 trials\n```\n1.5x\n```"
    ) == ["0.1557", "8.35x", "88.4%"]
