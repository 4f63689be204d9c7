"""The GPU kit is one package whose imports flow one way (issue 34): benchmarks/gpu/, each
module importing only those its package docstring lists before it, and no cycle among it and
benchmarks/' scripts; the command scripts (benchmarks/gpu_groundtruth.py, gpu_measured.py) import the package and nothing
imports them; nothing holds modules together through sys.modules. Imports are read with
``ast``, function-level ones too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_layering import cycles_of

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
KIT = BENCHMARKS / "gpu"
#: The kit's commands, run as `python benchmarks/NAME.py`.
SCRIPTS = ("gpu_groundtruth", "gpu_measured")


def kit_modules() -> dict[str, Path]:
    """gpu.NAME -> its file, for every module of the package (its __init__ is `gpu`)."""
    return {("gpu" if p.stem == "__init__" else f"gpu.{p.stem}"): p for p in sorted(KIT.glob("*.py"))}


def scripts() -> dict[str, Path]:
    """Every script of benchmarks/ by the name an import would give it."""
    return {p.stem: p for p in sorted(BENCHMARKS.glob("*.py"))}


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The kit's modules and benchmarks/' scripts that `path` imports (``from gpu import x``:
    gpu.x when it is a module, else gpu)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (write `from gpu.… import …`)"
            if node.module in modules:
                found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names)
    return found


def kit_files() -> dict[str, Path]:
    """The kit's modules and its command scripts."""
    return {**{s: BENCHMARKS / f"{s}.py" for s in SCRIPTS}, **kit_modules()}


def import_graph() -> dict[str, set[str]]:
    """What each script of benchmarks/ and each module of the kit imports of them."""
    files = {**scripts(), **kit_modules()}
    return {name: imports_of(path, set(files)) - {name} for name, path in files.items()}


def listed_order() -> list[str]:
    """The modules as the package docstring lists them ("- NAME: what it does"), lowest first."""
    return [f"gpu.{name}" for name in re.findall(r"^- (\w+): ", ast.get_docstring(ast.parse((KIT / "__init__.py").read_text())), re.MULTILINE)]


def test_the_kits_import_graph_has_no_cycle():
    assert cycles_of(import_graph()) == []


def test_the_package_docstring_lists_every_module_of_the_kit():
    assert sorted(listed_order()) == sorted(set(kit_modules()) - {"gpu"})


def test_each_module_imports_only_modules_listed_before_it():
    order = listed_order()
    graph = import_graph()
    upward = [f"{module} imports {target}" for module in order for target in sorted(graph[module])
              if target not in order or order.index(target) >= order.index(module)]
    assert upward == []


def test_the_commands_import_the_package_and_nothing_imports_a_command():
    graph = import_graph()
    assert {s: graph[s] for s in SCRIPTS} == {"gpu_groundtruth": {"gpu.cli"}, "gpu_measured": {"gpu.measured"}}
    assert [f"{m} imports {t}" for m, ts in graph.items() for t in sorted(ts) if t in SCRIPTS] == []


def test_the_package_imports_no_script_of_benchmarks():
    graph = import_graph()
    assert [f"{m} imports {t}" for m in kit_modules() for t in sorted(graph[m]) if t in scripts()] == []


def _touches_sys_modules(node: ast.AST) -> bool:
    """`sys.modules[...] = ...`, `del sys.modules[...]`, or a call of a method of sys.modules
    that changes it (setdefault, update, pop, ...)."""
    def is_sys_modules(n: ast.AST) -> bool:
        return isinstance(n, ast.Attribute) and n.attr == "modules" and isinstance(n.value, ast.Name) and n.value.id == "sys"

    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        return any(is_sys_modules(t) or (isinstance(t, ast.Subscript) and is_sys_modules(t.value)) for t in targets)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_sys_modules(node.func.value)
            and node.func.attr in {"setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__"})


def test_nothing_in_the_kit_changes_sys_modules():
    found = [f"{path.relative_to(BENCHMARKS)}:{node.lineno}" for path in kit_files().values()
             for node in ast.walk(ast.parse(path.read_text())) if _touches_sys_modules(node)]
    assert found == []


def test_a_cycle_and_a_sys_modules_assignment_are_seen():
    """The checks above catch what issue 34 found: gpu_groundtruth.py and gpu_bundle.py
    importing each other, held together by `sys.modules.setdefault(...)`."""
    assert cycles_of({"gpu_groundtruth": {"gpu_bundle"}, "gpu_bundle": {"gpu_groundtruth"}}) == ["gpu_bundle → gpu_groundtruth → gpu_bundle"]
    code = 'sys.modules.setdefault("gpu_groundtruth", sys.modules[__name__])\nsys.modules["x"] = y\nimport sys as s\n'
    assert sorted(node.lineno for node in ast.walk(ast.parse(code)) if _touches_sys_modules(node)) == [1, 2]
