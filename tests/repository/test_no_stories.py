"""The prose says what the project does and why, in the present tense, never a story of a past run: no
docstring or comment of tokengen/, sweeps/, tracking/, benchmarks/ or scripts/, and no page of README.md or
docs/, tells what happened once, this morning or in an issue. git keeps the history; a measured figure
lives in docs/results.md with its date, machine and command, the one place a date may stand.

Each pattern below names one way a story is told. They are precise on purpose: "once" alone is the
project's word for "a single time" (compiled once, once per trial) and "round" a remeasure round, so only
"once" followed by a past-tense verb counts, and only the diary's words for time (this morning, the
evening, a date) count as time.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = ("tokengen", "sweeps", "tracking", "benchmarks", "scripts")
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
DATED = {ROOT / "docs" / "results.md"}  # where each measured figure stands with its date

PAST = r"(?:was|were|had|did|saw|seen|showed|shown|printed|took|ran|hung|failed|crashed|stalled|spun|went|gave|lost"
PAST += r"|broke|happened|timed out|read as|ended after|measured)"
STORIES = {
    "once + a past verb (an anecdote)": rf"\bonce {PAST}\b",
    "used to (the way it was)": r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bwas )(?<!\bwere )\bused to\b"
    r"|\bas it always was\b",
    "a time of day": r"\b(?:morning|afternoon|evening|tonight|yesterday)\b",
    "a day or hour of a diary": r"\b(?:today|that day|the same (?:day|hour)|earlier that day|later that day)\b",
    "a past session or time": r"\blast (?:session|week|night)\b|\bthe last time\b|\bthe other day\b",
    "we + a past verb": r"\bwe (?:saw|found|measured|ran|had|got|tried|noticed|observed|fixed|changed|learned)\b",
    "then and now": r"\b(?:at the time|back then|in the past|turned out|since fixed|now fixed)\b",
    "a first try": r"\bfirst (?:tried|try)\b|\bfirst (?:GPU|real) try\b",
    "before and after a change": r"\bbefore (?:these|this round's|this) changes?\b|\bafter (?:these|this) changes?\b"
    r"|\b(?:old and new|both|the two) trees\b|\bthe (?:old|new) tree\b|\bthe code (?:of )?(?:before|after)\b",
    "an issue, a loan": r"\bissue #?\d+|\bthe issue's\b|\blent\b|\bwas built by\b",
    "a run measured on main": r"\b(?:measured|ran|run) on main\b",
    "a clock time": r"\b(?:at|from|until) (?:[01]\d|2[0-3]):[0-5]\d\b"
    r"|\b(?:[01]\d|2[0-3]):[0-5]\d-(?:[01]\d|2[0-3]):[0-5]\d\b",
}
DATE = {"a date": r"\b20\d\d-[01]\d-[0-3]\d\b"}  # a day: only docs/results.md, beside the figure measured on it
SESSIONS = {"sessions of work": r"\bsessions\b"}  # in the docs; in the code a process's sessions are its own


def stories(text: str, dated: bool = False, page: bool = False) -> list[str]:
    """`rule: the words` for each story told in `text`: a date allowed where `dated`, sessions counted on a `page`."""
    rules = {**STORIES, **({} if dated else DATE), **(SESSIONS if page else {})}
    return [f"{name}: {m.group(0)!r}" for name, rule in rules.items() for m in re.finditer(rule, text, re.IGNORECASE)]


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each comment and docstring of a Python file; each comment of a shell script."""
    text = path.read_text()
    if path.suffix == ".sh":
        return [(n, line[line.index("#") :]) for n, line in enumerate(text.splitlines(), 1) if "#" in line]
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        string = token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith(('"""', "'''"))
        if token.type == tokenize.COMMENT or string:
            found.append((token.start[0], token.string))
    return found


def code_stories(root: Path = ROOT, folders=CODE) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".sh") and "__pycache__" not in path.parts:
                for line, text in prose(path):
                    found += [f"{path.relative_to(root)}:{line}: {story}" for story in stories(text)]
    return found


def test_no_comment_or_docstring_tells_a_story():
    assert code_stories() == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_tells_a_story(page):
    assert stories(page.read_text(), dated=page in DATED, page=True) == []


STORIED = [
    "A busy machine once printed a speedup of 0.06x with no mark.",
    "killing the session leaves it running (once seen spinning on a core for ten minutes)",
    "The report used to read every run; this morning it took 49 s, 12 s in the afternoon, 8 s the same day.",
    "Measured on main on 2026-12-03, quiet, from 18:22; compare at 11-14 s before these changes.",
    "No GPU was lent (issue 12); we saw it hang in the last session.",
    "First tried on an H200, it turned out slower: old and new trees alternated; the code before took longer.",
]
TOLD = [
    "A trial is compiled once per graph and called once per run; once compiled, a twin loads warm.",
    "A remeasure round finds the graphs its first round compiled; the dependency tree is resolved.",
    "a value no longer declared reads as its own text; the last timed run's checksum; the day's calibration",
    "http://127.0.0.1:5000 on port 5000; the trial's session; a seed is used to draw rows",
    "Measured on 2026-12-06 on this 2-core VM (load 4-5), `python benchmarks/quant.py`.",
]


def test_the_rule_finds_each_story_and_spares_the_project_words():
    told = [stories(text) for text in STORIED]
    assert all(told), told
    found = {story.partition(":")[0] for found in told for story in found}
    assert found == set(STORIES) | set(DATE), set(STORIES) - found
    assert stories("these sessions", page=True) and not stories("flat sessions, one page")
    assert [stories(text) for text in TOLD[:-1]] == [[]] * (len(TOLD) - 1)
    assert stories(TOLD[-1]) == ["a date: '2026-12-06'"] and stories(TOLD[-1], dated=True) == []


def test_the_rule_reads_comments_and_docstrings_not_code(tmp_path):
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "told.py").write_text(
        '"""What it is."""\n\nONCE_PRINTED = "once printed"  # a string, not prose\n\n\n'
        'def f():\n    """A busy machine once printed 0.06x."""\n    return 1  # we saw it on 2026-12-01\n'
    )
    (tmp_path / "sweeps" / "told.sh").write_text('echo "this morning"\n# it used to hang\n')
    assert code_stories(tmp_path, ("sweeps",)) == [
        "sweeps/told.py:7: once + a past verb (an anecdote): 'once printed'",
        "sweeps/told.py:8: we + a past verb: 'we saw'",
        "sweeps/told.py:8: a date: '2026-12-01'",
        "sweeps/told.sh:2: used to (the way it was): 'used to'",
    ]
