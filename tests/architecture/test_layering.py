"""The package's imports flow one way: cli → report → api → plan → passes → layers →
prototxt → errors/graph/units/schema.  Every import is read with ``ast`` (function-level
imports too: a lazy import is still a dependency); a cycle or an upward edge fails,
naming the modules."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "caffemem"

# Lower rank = lower layer.  A module may import its own layer and any lower one.
RANKS = {
    "caffemem._version": 0,
    "caffemem.errors": 0,
    "caffemem.units": 0,
    "caffemem.graph": 0,
    "caffemem.schema": 0,
    "caffemem.userfiles": 0,
    "caffemem.prototxt": 1,
    "caffemem.databases": 1,  # LMDB and LevelDB read from their files, as prototxt reads the user's
    "caffemem.layers": 2,
    "caffemem.passes": 3,
    "caffemem.plan": 4,
    "caffemem.api": 5,
    "caffemem.runtime": 5,
    "caffemem.report": 6,
    "caffemem.cli": 7,
    "caffemem.__main__": 8,
    "caffemem": 8,  # the package's __init__: the public API, on top of everything
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def rank_of(module: str) -> int:
    best = max((prefix for prefix in RANKS if module == prefix or module.startswith(prefix + ".")), key=len)
    return RANKS[best]


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """caffemem modules that `path` imports (``from caffemem.x import y``: y when it is a
    module, else caffemem.x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "caffemem")
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (write `from caffemem.… import …`)"
            if node.module and node.module.split(".")[0] == "caffemem":
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    found.add(child if child in modules else node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(path, modules) - {name} for name, path in paths.items()}


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{module} (rank {rank_of(module)}) imports {target} (rank {rank_of(target)})"
        for module, targets in import_graph().items()
        for target in targets
        if rank_of(target) > rank_of(module)
    ]
    assert upward == []


def cycles_of(graph: dict[str, set[str]]) -> list[str]:
    """Each cycle of an import graph (module -> the modules it imports), as "a → b → a"."""
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycles.append(" → ".join(path[path.index(target):] + [target]) if target in path else f"{node} → {target}")
            elif target not in state:
                visit(target, path + [target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    # A package's __init__ importing its own submodules (layers/__init__ lists the families)
    # is how a package is assembled, not a dependency of the submodules on it.
    graph = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}
    assert cycles_of(graph) == []


def test_the_ranks_name_every_top_level_module():
    tops = {module_name(p).split(".")[1] if "." in module_name(p) else "" for p in PACKAGE.rglob("*.py")}
    named = {prefix.split(".")[1] for prefix in RANKS if "." in prefix}
    assert tops - {""} <= named


# The API's helpers a view may call: they format a figure, they compute none.
API_FORMATTERS = {"caffemem.api.check": {"change_percent", "signed"}}


def imported_names(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of each caffemem import of ``path`` (``import caffemem.x``: name None)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "caffemem"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "caffemem":
            found += [(node.module, alias.name) for alias in node.names]
    return found


def formats_only(module: str, name: str | None) -> bool:
    """What a view may import: the ground floor, another view, and from the API the
    results' types and constants (a class or a value, not a function) or a formatter."""
    if rank_of(module) == 0 or module.startswith("caffemem.report"):
        return True
    if not module.startswith("caffemem.api.") or name is None:
        return False
    return not inspect.isfunction(getattr(importlib.import_module(module), name)) or name in API_FORMATTERS.get(module, ())


def test_the_views_format_what_the_api_computed_and_analyse_nothing():
    """report/ renders results: it imports no pass, planner or layer rule, and no API
    function that analyses (issue 34: html.py rebuilt the schedule, the liveness and the
    card's run itself, climbing back up through twelve modules)."""
    analysing = [
        f"{module_name(path)} imports {module}{f'.{name}' if name else ''}"
        for path in sorted((PACKAGE / "report").rglob("*.py"))
        for module, name in imported_names(path)
        if not formats_only(module, name)
    ]
    assert analysing == [], "\n".join(analysing)
