"""Every MLflow tag or param name that sweeps/ and tracking/ write or search by is a constant, spelled once in
tokengen/contract/names.py (or, for MLflow's own names, tracking/store/), so a query and the write it reads
cannot drift apart: no search filter spells `tags.<name>` in a string, no `set_tag`, `log_param`, `RunTag`,
`Param` or tag filter names one by a string literal. Read from the source's syntax, each case built on purpose."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from tokengen.contract import names
from tokengen.contract.record import TAG, TrialResult
from tokengen.contract.spec import LABELS

ROOT = Path(__file__).resolve().parents[2]
QUERY = re.compile(r"\b(tags|params)\.`?[A-Za-z_]")  # `tags.status = ...`: a name spelled inside a filter
NAMED_BY = {"set_tag": 1, "log_param": 1, "RunTag": 0, "Param": 0}  # the call's argument that names the tag or param
FILTERS = ("runs", "_tags")  # Tables.runs and Recorder._tags: a dict of tag names to the values searched for


def _name_of(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _literal(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def spelled_names(source: str) -> list[str]:
    """Each tag or param name spelled as a literal where the store is written or searched, as `line: expression`."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    found = []
    for node in ast.walk(tree):
        if _literal(node) and id(node) not in docstrings and QUERY.search(node.value):
            found.append(f"{node.lineno}: {node.value!r}")
        if not isinstance(node, ast.Call):
            continue
        position = NAMED_BY.get(_name_of(node))
        if position is not None and len(node.args) > position and _literal(node.args[position]):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        given = node.args if _name_of(node) in FILTERS else [k.value for k in node.keywords if k.arg == "tags"]
        for value in given:  # a filter's names, or create_run's tags={NAME: ...}
            if isinstance(value, ast.Dict) and any(_literal(k) for k in value.keys):
                found.append(f"{node.lineno}: {ast.unparse(value)}")
    return found


def test_no_tag_or_param_name_is_spelled_where_the_store_is_written_or_searched():
    found = [
        f"{path.relative_to(ROOT)}:{hit}"
        for folder in ("sweeps", "tracking")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in spelled_names(path.read_text())
    ]
    assert found == [], "use the constant in tokengen/contract/names.py"


@pytest.mark.parametrize(
    "source",
    [
        "where = f\"tags.sweep_parent = '{name}'\"",
        "runs = search(client, i, \"tags.status = 'finished'\")",
        'client.set_tag(run_id, "failed_trials", "2")',
        'batch = [RunTag("status", status)]',
        'client.create_run(i, run_name=name, tags={"sweep_parent": name})',
        'frame = tables.runs(i, {"sweep": name, PARENT_TAG: None})',
    ],
)
def test_the_rule_finds_a_name_spelled_in_a_query_or_a_write(source):
    assert spelled_names(source), source


@pytest.mark.parametrize(
    "source",
    [
        "where = f\"tags.{SWEEP_PARENT} = '{name}'\"",
        "where = f\"tags.`{mark_of(parent_id)}` = '{sweep}'\"",
        'def f():\n    """Columns lose their `tags.` prefix: `tags.status` reads as `status`."""',
        "client.set_tag(run_id, FAILED_TRIALS, str(failed))",
        'row = {"status": status}',  # a row of data, not a write to the store
        "frame = tables.runs(i, {SWEEP_TAG: name, PARENT_TAG: None})",
    ],
)
def test_the_rule_leaves_constants_docstrings_and_rows_alone(source):
    assert spelled_names(source) == [], source


def test_the_names_of_record_fields_are_the_fields_they_name():
    """A constant that names a record's field names a tag the recorder writes from that field: a renamed field
    fails here, not as a search that silently finds nothing."""
    tags = {f.name for f in dataclasses.fields(TrialResult) if f.metadata["role"] == TAG}
    assert {names.STATUS, names.ATTEMPT, names.ATTEMPT_ID} <= tags
    assert names.VARIANT in LABELS
