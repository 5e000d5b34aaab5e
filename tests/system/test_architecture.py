"""The shape of the code that docs/ARCHITECTURE.md promises, checked on the source itself.

`lint-imports` (run by `make test`) checks the layers between the apps; these tests check what it
doesn't: that no product module is part of an import cycle, counting imports made inside
functions (the usual way to hide one), that only the lifecycle module changes a job's status, and
that only the node lifecycle module changes a node's status (the admin's forms included).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("base", "portal", "billing", "market", "workers", "openai_api")
LIFECYCLE = "workers.services.lifecycle"
NODE_LIFECYCLE = "workers.services.node_lifecycle"


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
        if name != LIFECYCLE and not name.startswith(f"{LIFECYCLE}.")  # the lifecycle package's own modules
        for line in job_status_writes(ast.parse(path.read_text()))
    }
    assert writers == set()


NODE_STATUS = "agent_status"
# Raw SQL that writes a node's status: an UPDATE of the node table setting it (in its SET clause, before
# any FROM or WHERE), or an INSERT naming it.
NODE_STATUS_SQL = re.compile(
    rf"\bupdate\s+\"?workers_node\"?\s.*?\bset\b(?:(?!\b(?:from|where)\b).)*\b{NODE_STATUS}\s*="
    rf"|\binsert\s+into\s+\"?workers_node\"?.*\b{NODE_STATUS}\b",
    re.IGNORECASE | re.DOTALL,
)
QUERYSET_WRITES = {"update", "create", "get_or_create", "update_or_create", "bulk_create", "bulk_update"}


def _names_node_status(node: ast.AST) -> bool:
    """A keyword, a dict key or a list of field names that names the status (`defaults=`, `fields`)."""
    if isinstance(node, ast.Constant):
        return node.value == NODE_STATUS
    if isinstance(node, ast.Dict):
        return any(key is not None and _names_node_status(key) for key in node.keys) or any(
            _names_node_status(value) for value in node.values if isinstance(value, ast.Dict)
        )
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return any(_names_node_status(element) for element in node.elts)
    return False


def _writes_node_status_in_sql(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(NODE_STATUS_SQL.search(node.value))


def _writes_node_status_in_call(call: ast.AST) -> bool:
    if not isinstance(call, ast.Call):
        return False
    if isinstance(call.func, ast.Name) and call.func.id == "setattr":
        return len(call.args) > 1 and _names_node_status(call.args[1])
    if not (isinstance(call.func, ast.Attribute) and call.func.attr in QUERYSET_WRITES):
        return False
    if any(keyword.arg == NODE_STATUS for keyword in call.keywords):  # update(agent_status=…), create(…)
        return True
    return any(  # update(**{"agent_status": …}), update_or_create(defaults={…}), bulk_update(nodes, [fields])
        _names_node_status(value)
        for value in [*(keyword.value for keyword in call.keywords), *call.args[1:]]
        if isinstance(value, ast.Dict | ast.List | ast.Tuple | ast.Set)
    )


def node_status_writes(tree: ast.AST) -> list[int]:
    """Lines that set a node's status: `node.agent_status = …` (any name: the field is the node's alone),
    a queryset's `update(agent_status=…)` and its kin, `setattr`, and raw SQL that updates it."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(
                isinstance(part, ast.Attribute) and part.attr == NODE_STATUS
                for target in targets
                for part in ast.walk(target)
            ):
                lines.append(node.lineno)
        elif _writes_node_status_in_call(node) or _writes_node_status_in_sql(node):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize(
    "source",
    [
        "node.agent_status = 'lost'",
        "node.agent_status, node.last_heartbeat_at = 'online', now",
        "queryset.update(agent_status='draining')",
        "Node.objects.filter(pk=1, agent_status='lost').update(agent_status=F('x'))",
        "Node.objects.filter(pk=1).update(**{'agent_status': 'online'})",
        "Node.objects.create(hostname='h', agent_status='online')",
        "Node.objects.update_or_create(hostname='h', defaults={'agent_status': 'online'})",
        "Node.objects.bulk_update(nodes, ['agent_status'])",
        "setattr(node, 'agent_status', 'online')",
        "cursor.execute('UPDATE workers_node SET health = %s, agent_status = %s WHERE id = %s')",
        "SQL = ('update \"workers_node\" AS n SET last_heartbeat_at = v.seen,' ' agent_status = CASE END')",
    ],
)
def test_the_node_status_writer_finder_sees_a_write(source):
    assert node_status_writes(ast.parse(source)) == [1]


@pytest.mark.parametrize(
    "source",
    [
        "Node.objects.filter(agent_status='online').update(health={})",
        "node.agent_status == 'lost'",
        "cursor.execute('SELECT id FROM workers_node WHERE agent_status = %s')",
        "UPDATE = 'UPDATE workers_node SET last_heartbeat_at = now() WHERE agent_status = %s'",
    ],
)
def test_the_node_status_writer_finder_passes_reads(source):
    assert node_status_writes(ast.parse(source)) == []


def test_only_the_node_lifecycle_module_changes_a_nodes_status():
    writers = {
        f"{name}:{line}"
        for name, path in product_modules().items()
        if name != NODE_LIFECYCLE
        for line in node_status_writes(ast.parse(path.read_text()))
    }
    assert writers == set()


def node_admin_forms():
    """(name, form class) of every admin page that edits nodes: their own admin and inlines elsewhere."""
    from django.contrib import admin
    from django.contrib.auth.models import AnonymousUser
    from django.test import RequestFactory

    from fleet.models import Node

    class Operator(AnonymousUser):  # every permission, no database
        is_active = is_staff = is_superuser = True

        def has_perm(self, perm, obj=None) -> bool:
            return True

    request = RequestFactory().get("/admin/")
    request.user = Operator()
    for model, model_admin in admin.site._registry.items():
        if model is Node:
            yield type(model_admin).__name__, model_admin.get_form(request)
            yield f"{type(model_admin).__name__} list_editable", model_admin.get_changelist_formset(request).form
        for inline in model_admin.get_inline_instances(request) if model is not Node else []:
            if inline.model is Node:
                yield type(inline).__name__, inline.get_formset(request).form


def test_no_admin_form_edits_a_nodes_status():
    """An operator changes a node's status only through the node actions, which call the node lifecycle."""
    forms = dict(node_admin_forms())
    assert {"NodeAdmin", "NodeInline"} <= set(forms)
    editing = sorted(name for name, form in forms.items() if NODE_STATUS in form.base_fields)
    assert editing == []
