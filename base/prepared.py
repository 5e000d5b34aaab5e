"""Read queries compiled to SQL once per thread and run again with each request's values.

An API list page runs one or two small queries, and building and compiling them with the ORM costs
more CPU than running them: the filters, annotations and ordering are resolved, every selected
column hashed, the SQL string assembled, for the same statement every time. A `PreparedQuery`
builds its queryset once with a stand-in value for each named parameter, keeps the compiled SQL, and
afterwards only swaps in the request's values and appends the page's LIMIT and OFFSET. The rows
become model instances exactly as the queryset would make them (Django's converters, `select_related`
objects and annotations).

What can be a parameter: a value the queryset passes to the database unchanged (an id, a status, a
list of ids for `__any_of`). A parameter given as None is left out: `build` gets None and leaves its
filter out, and that shape is compiled (and kept) on its own. Building a query whose stand-in doesn't
come back out as a plain SQL parameter is refused at once, so a prepared query never silently ignores
a value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.db.models import Field, ForeignObject, Lookup, Model, QuerySet
from django.db.models.query import get_related_populators

# A stand-in per parameter kind: values no request sends, so each is found among the compiled params.
_STAND_IN_INT = -(2**62) + 7_000
_STAND_IN_TEXT = "\x1fprepared-parameter\x1f"


class AnyOf(Lookup):
    """`field__any_of=[...]`: `field = ANY(%s)` with the list as one array parameter (one SQL for any length)."""

    lookup_name = "any_of"
    prepare_rhs = False

    def get_db_prep_lookup(self, value, connection):
        return "%s", [list(value)]

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY({rhs})", (*lhs_params, *rhs_params)


Field.register_lookup(AnyOf)
ForeignObject.register_lookup(AnyOf)  # related fields keep lookups of their own


class PreparedQuery:
    """`build(**parameters)` -> a queryset, compiled once per thread; `rows(...)` runs it with new values.

    `parameters` names each parameter and its kind: int, str or list (a list of ints, for `__any_of`);
    `build` takes them all, None standing for a parameter left out.
    """

    def __init__(self, build: Callable[..., QuerySet], using: str = "default", **parameters: type) -> None:
        self.build, self.using, self.parameters = build, using, parameters
        self._compiled = threading.local()  # a compiler belongs to its thread's connection

    def rows(self, *, limit: int | None = None, offset: int = 0, **values: Any) -> list[Model]:
        if values.keys() != self.parameters.keys():
            raise TypeError(f"expected the parameters {sorted(self.parameters)}, got {sorted(values)}")
        given = frozenset(name for name, value in values.items() if value is not None)
        if wrong := sorted(name for name in given if not isinstance(values[name], self.parameters[name])):
            raise TypeError(f"{', '.join(wrong)}: expected {', '.join(self.parameters[n].__name__ for n in wrong)}")
        compiler, sql, params, slots = self._compile(given)
        params = [values[slots[i]] if i in slots else value for i, value in enumerate(params)]
        if limit is not None:
            sql, params = f"{sql} LIMIT %s OFFSET %s", [*params, limit, offset]
        with connections[self.using].cursor() as cursor:
            cursor.execute(sql, params)
            fetched = cursor.fetchall()
        return list(_instances(compiler, fetched, self.using))

    def _compile(self, given: frozenset[str]):
        shapes = self._compiled.__dict__.setdefault("shapes", {})
        compiled = shapes.get(given)
        if compiled is None or compiled[0].connection is not connections[self.using]:
            compiled = shapes[given] = self._compile_now(given)
        return compiled

    def _compile_now(self, given: frozenset[str]):
        stand_ins = {
            name: _stand_in(kind, index) for index, (name, kind) in enumerate(self.parameters.items()) if name in given
        }
        queryset = self.build(**{name: stand_ins.get(name) for name in self.parameters})
        if queryset.query.is_sliced:
            raise ValueError("a prepared query is sliced by rows(limit=, offset=), not by the queryset")
        compiler = queryset.query.get_compiler(using=self.using)
        sql, params = compiler.as_sql()
        slots = {}
        for position, value in enumerate(params):
            for name, stand_in in stand_ins.items():
                if type(value) is type(stand_in) and value == stand_in:
                    slots[position] = name
        if missing := set(stand_ins) - set(slots.values()):
            raise ValueError(f"the prepared query does not pass {sorted(missing)} to the database as a parameter")
        return compiler, sql, list(params), slots


def _stand_in(kind: type, index: int):
    if kind is int:
        return _STAND_IN_INT + index
    if kind is str:
        return f"{_STAND_IN_TEXT}{index}"
    if kind is list:
        return [_STAND_IN_INT + index]
    raise TypeError(f"a prepared parameter is an int, a str or a list, not {kind.__name__}")


def _instances(compiler, fetched: list[tuple], using: str):
    """Model instances from `compiler`'s rows, as django.db.models.query.ModelIterable makes them."""
    select, klass_info, annotation_col_map = compiler.select, compiler.klass_info, compiler.annotation_col_map
    model = klass_info["model"]
    first, last = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
    names = [column[0].target.attname for column in select[first:last]]
    populators = get_related_populators(klass_info, select, using)
    for row in compiler.results_iter([fetched]):
        instance = model.from_db(using, names, row[first:last])
        for populator in populators:
            populator.populate(row, instance)
        for name, position in (annotation_col_map or {}).items():
            setattr(instance, name, row[position])
        yield instance


class PreparedPage:
    """What the API's paginator slices (portal.api.pagination): a prepared query's rows for one request.

    `page[a:b]` runs the query with LIMIT/OFFSET and hands the rows to `then` (to attach what the page
    also needs, e.g. each row's related lists); counting, which the paginator does only for a full
    page, goes through the ORM queryset `build` makes of the same values.
    """

    def __init__(self, query: PreparedQuery, then: Callable[[list[Model]], None] | None = None, **values: Any) -> None:
        self.query, self.then, self.values = query, then, values

    def __getitem__(self, bounds: slice) -> list[Model]:
        if not isinstance(bounds, slice) or bounds.step is not None or bounds.start is None or bounds.stop is None:
            raise TypeError("a prepared page is read as page[start:stop]")
        return self._attached(self.query.rows(limit=bounds.stop - bounds.start, offset=bounds.start, **self.values))

    def __iter__(self):
        return iter(self._attached(self.query.rows(**self.values)))

    def order_by(self, *fields: str) -> QuerySet:
        return self.query.build(**self.values).order_by(*fields)

    def _attached(self, rows: list[Model]) -> list[Model]:
        if self.then is not None and rows:
            self.then(rows)
        return rows


def prefetched(instances: list[Model], name: str, related: list[Model], key: str) -> None:
    """Give each instance its `name` related objects from `related` (grouped by their `key` attribute), in
    `related`'s order, as prefetch_related would: `instance.<name>.all()` answers them without a query."""
    grouped: dict[Any, list[Model]] = {instance.pk: [] for instance in instances}
    for item in related:
        grouped[getattr(item, key)].append(item)
    for instance in instances:
        instance.__dict__.setdefault("_prefetched_objects_cache", {})[name] = grouped[instance.pk]
