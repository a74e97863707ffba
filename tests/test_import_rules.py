"""The packages import in one direction: no module of tokengen/, sweeps/ or tracking/ imports, through
any chain, one that imports it back (imports inside functions count, since they run too). A package's
`from PKG import NAME` counts as importing the package itself: its __init__ runs and may import the
importer. One case below builds a circle on purpose and watches the rule find it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tokengen", "sweeps", "tracking")


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
