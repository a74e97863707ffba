"""The house rules of tokengen/, sweeps/ and tracking/, read from the source (imports inside functions
count, since they run too), each with a case built on purpose that the rule must find:

- no import circle: no module imports, through any chain, one that imports it back (a package's
  `from PKG import NAME` counts as importing the package: its __init__ runs and may import the importer);
- one door to the store: only tracking/store/ imports mlflow, names MlflowClient or imports sqlite3
  (benchmarks/ included; the nsys export's own SQLite file, read by the profiler, is the one exception);
- the sweep's stages in order: planning, pricing, execution, delivery, each importing no later one;
- tokengen stands alone: no module of tokengen/ reaches sweeps or tracking (or Hydra, OmegaConf, Ray, MLflow)
  through any chain of imports, so one trial needs torch and transformers only.

A file is as long as its one idea: no rule counts lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tokengen", "sweeps", "tracking")
DOOR = "tracking.store"
STORE_MODULES = ("mlflow", "sqlite3")
NOT_MLFLOWS_SQLITE = {"tokengen.measure.profiler.traces"}  # nsys's SQLite export, not a tracking store
STAGES = ("sweeps.planning", "sweeps.pricing", "sweeps.execution", "sweeps.delivery")
ABOVE_TOKENGEN = ("sweeps", "tracking", "hydra", "omegaconf", "ray", "mlflow")  # what one trial must not need


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, anywhere in its file."""

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {owner(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(owner(node.module))  # `from PKG import X` runs PKG's __init__, whatever X is
            found |= {f"{node.module}.{alias.name}" for alias in node.names} & set(known)  # and X, a module
    return {m for m in found if m and m != name}


def circles(known: dict[str, Path]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    graph = {name: imports(name, path, known) for name, path in known.items()}
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for name in graph:
        if name not in index:
            visit(name)
    return groups


def test_no_module_imports_one_that_imports_it_back():
    assert circles(modules(ROOT)) == []


def test_the_rule_finds_a_circle_through_a_function_and_a_package(tmp_path):
    package = tmp_path / "sweeps"
    (package / "estimate").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "run.py").write_text("from sweeps import pricing\n")
    (package / "pricing.py").write_text("def price():\n    from sweeps.run import plan\n")
    (package / "estimate" / "__init__.py").write_text("from sweeps.estimate.model import CostModel\n")
    (package / "estimate" / "model.py").write_text("from sweeps.estimate import priors\n")
    (package / "estimate" / "priors.py").write_text("")
    found = circles(modules(tmp_path, ("sweeps",)))
    assert ["sweeps.estimate", "sweeps.estimate.model"] in found
    assert ["sweeps.pricing", "sweeps.run"] in found


def store_reaches(known: dict[str, Path]) -> dict[str, list[str]]:
    """Modules outside the door that import mlflow or sqlite3 or name MlflowClient, with what they reach."""
    found = {}
    for name, path in known.items():
        if name == DOOR or name.startswith(DOOR + "."):
            continue
        reached = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                reached |= {a.name.split(".")[0] for a in node.names} & set(STORE_MODULES)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in STORE_MODULES:
                reached.add(node.module.split(".")[0])
            elif (
                isinstance(node, ast.Name)
                and node.id == "MlflowClient"
                or (isinstance(node, ast.Attribute) and node.attr == "MlflowClient")
            ):
                reached.add("MlflowClient")
            elif isinstance(node, ast.alias) and node.name == "MlflowClient":
                reached.add("MlflowClient")
        if name in NOT_MLFLOWS_SQLITE:
            reached.discard("sqlite3")
        if reached:
            found[name] = sorted(reached)
    return found


def stage_of(name: str) -> int | None:
    return next((i for i, stage in enumerate(STAGES) if name == stage or name.startswith(stage + ".")), None)


def later_stage_imports(known: dict[str, Path]) -> list[tuple[str, str]]:
    """(module, the later stage's module it imports) for every stage that reaches forward."""
    found = []
    for name, path in known.items():
        own = stage_of(name)
        if own is None:
            continue
        for target in imports(name, path, known):
            theirs = stage_of(target)
            if theirs is not None and theirs > own:
                found.append((name, target))
    return sorted(found)


def top_level_imports(path: Path) -> set[str]:
    """The first part of every absolute import in the file (`hydra` for `from hydra.core import x`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def reaches_up(known: dict[str, Path]) -> dict[str, list[str]]:
    """tokengen modules that reach a package above them (ABOVE_TOKENGEN) through any chain of imports: module -> the
    chain, itself first and what it reached last (a tokengen module importing one that imports sweeps counts)."""
    graph = {name: imports(name, path, known) for name, path in known.items()}
    third_party = set(ABOVE_TOKENGEN) - set(known)  # the project's own packages are followed module by module
    outside = {name: sorted(top_level_imports(path) & third_party) for name, path in known.items()}
    found = {}
    for start in sorted(n for n in known if n.split(".")[0] == "tokengen"):
        chains, seen = [[start]], {start}
        while chains:
            chain = chains.pop(0)  # breadth first: the shortest chain is the one shown
            here = chain[-1]
            if here.split(".")[0] in ABOVE_TOKENGEN or outside[here]:
                found[start] = chain if here.split(".")[0] in ABOVE_TOKENGEN else [*chain, outside[here][0]]
                break
            for target in sorted(graph[here] - seen):
                seen.add(target)
                chains.append([*chain, target])
    return found


def test_only_the_door_reaches_the_store():
    assert store_reaches(modules(ROOT, PACKAGES + ("benchmarks",))) == {}


def test_no_stage_imports_a_later_one():
    assert later_stage_imports(modules(ROOT)) == []


def test_tokengen_reaches_nothing_above_it():
    assert reaches_up(modules(ROOT)) == {}


def test_the_rule_finds_tokengen_reaching_up_through_a_chain(tmp_path):
    for folder in ("tokengen", "tokengen/contract", "sweeps", "sweeps/pricing"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "tokengen" / "cli.py").write_text("def main():\n    from tokengen.contract import guard\n")
    (tmp_path / "tokengen" / "contract" / "guard.py").write_text("from tokengen.contract.sizes import shape\n")
    (tmp_path / "tokengen" / "contract" / "sizes.py").write_text("import sweeps.pricing.memory_guard\n")
    (tmp_path / "tokengen" / "settings.py").write_text("from omegaconf import OmegaConf\n")
    (tmp_path / "tokengen" / "alone.py").write_text("import json\n")
    (tmp_path / "sweeps" / "pricing" / "memory_guard.py").write_text("")
    found = reaches_up(modules(tmp_path, ("tokengen", "sweeps")))
    assert found["tokengen.cli"] == [
        "tokengen.cli",
        "tokengen.contract.guard",
        "tokengen.contract.sizes",
        "sweeps.pricing.memory_guard",
    ]
    assert found["tokengen.settings"] == ["tokengen.settings", "omegaconf"]
    assert set(found) == {"tokengen.cli", "tokengen.contract.guard", "tokengen.contract.sizes", "tokengen.settings"}


def test_the_rules_find_a_stray_store_import_and_a_stage_reaching_forward(tmp_path):
    sweeps = tmp_path / "sweeps"
    for folder in ("planning", "pricing", "execution", "delivery"):
        (sweeps / folder).mkdir(parents=True)
        (sweeps / folder / "__init__.py").write_text("")
    (sweeps / "__init__.py").write_text("")
    (sweeps / "pricing" / "price.py").write_text("def history():\n    from mlflow import MlflowClient\n")
    (sweeps / "planning" / "grid.py").write_text("import sqlite3\n")
    (sweeps / "execution" / "task.py").write_text("def done():\n    from sweeps.delivery.journal import Journal\n")
    (sweeps / "delivery" / "journal.py").write_text("from sweeps.execution import task\n")
    tracking = tmp_path / "tracking" / "store"
    tracking.mkdir(parents=True)
    (tracking / "recorder.py").write_text("from mlflow import MlflowClient\n")
    known = modules(tmp_path, ("sweeps", "tracking"))
    assert store_reaches(known) == {
        "sweeps.planning.grid": ["sqlite3"],
        "sweeps.pricing.price": ["MlflowClient", "mlflow"],
    }
    assert later_stage_imports(known) == [("sweeps.execution.task", "sweeps.delivery.journal")]
