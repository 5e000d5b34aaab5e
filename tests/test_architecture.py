"""The shape of the code that docs/ARCHITECTURE.md promises, checked on the source itself.

`lint-imports` (run by `make test`) checks the layers between the apps; these tests check what it
doesn't: that no product module is part of an import cycle, counting imports made inside
functions (the usual way to hide one), and that only the lifecycle module changes a job's status.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("base", "portal", "billing", "market", "workers")
LIFECYCLE = "workers.services.lifecycle"


def product_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """Product modules this file imports anywhere in it (top level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_product_module_is_in_an_import_cycle_counting_imports_inside_functions():
    modules = product_modules()
    graph = {
        name: {
            target
            for target in imported_modules(path, modules)
            if target != name and not name.startswith(target + ".")  # a package's own __init__
        }
        for name, path in modules.items()
    }
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def job_status_writes(tree: ast.AST) -> list[int]:
    """Lines that set a job's status: `job.status = …`, and `Job.objects….update/create(status=…)`."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if (
                        isinstance(part, ast.Attribute)
                        and part.attr == "status"
                        and isinstance(part.value, ast.Name)
                        and part.value.id == "job"
                    ):
                        lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            writes_status = node.func.attr in {"update", "create", "update_or_create", "bulk_update"} and any(
                keyword.arg == "status" for keyword in node.keywords
            )
            if writes_status and "Job.objects" in ast.unparse(node.func):
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("source", ["job.status = 'x'", "Job.objects.filter(pk=1).update(status='x')"])
def test_the_status_writer_finder_sees_a_write(source):
    assert job_status_writes(ast.parse(source)) == [1]


def test_only_the_lifecycle_module_changes_a_jobs_status():
    writers = {
        f"{name}:{line}"
        for name, path in product_modules().items()
        if name != LIFECYCLE
        for line in job_status_writes(ast.parse(path.read_text()))
    }
    assert writers == set()
