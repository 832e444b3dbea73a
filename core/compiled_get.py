"""A hot ``QuerySet.get(pk=...)`` whose SQL is compiled once per database connection instead of at every call.

Django compiles a queryset's SQL anew each time it runs it: for a read with ``select_related`` across several
relations that is most of the read's CPU in the process (``Run``'s claim with six relations: about 0.9 ms of a
worker's CPU a run, 0.2 ms with the compiled SQL; ``bench/serving_ceiling.py``'s profile put it at an eighth of a
worker's Python time). :class:`CompiledGet` compiles the queryset once per connection (per thread: Django's
connections are), then runs the same statement with the new primary key and builds the instances exactly as
``QuerySet.get`` does (:class:`django.db.models.query.ModelIterable`'s steps: the model's ``from_db``, then each
``select_related`` relation's populator). The statement's text is the same every time, so Postgres's server-side
prepared statements (``DB_PREPARE_THRESHOLD``) serve it as before.

Only a queryset whose sole parameter is the primary key's value can be compiled this way; the constructor says
so at the first use otherwise, rather than run a statement with the wrong parameters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model, QuerySet
from django.db.models.query import RelatedPopulator, get_related_populators
from django.db.models.sql.compiler import SQLCompiler

M = TypeVar("M", bound=Model)

_PROBE_PK = -7_340_033
"""The primary key the queryset is compiled with: its one parameter must come out as this value."""


@dataclass(frozen=True)
class _Compiled(Generic[M]):
    model: type[M]
    connection: BaseDatabaseWrapper
    compiler: SQLCompiler
    sql: str
    init_list: list[str]
    start: int
    end: int
    populators: list[RelatedPopulator]


class CompiledGet(Generic[M]):
    """``queryset(pk)``-style reads of one row by primary key, compiled once per connection.

    ``queryset``: builds the read without its ``pk`` filter (``Run.objects.select_related(...)``); called once per
    connection. ``get(pk)`` returns the instance with its ``select_related`` relations loaded, or raises the
    model's ``DoesNotExist``, as ``queryset().get(pk=pk)`` does, in one statement.
    """

    def __init__(self, queryset: Callable[[], QuerySet[M]], *, using: str = "default") -> None:
        self._queryset = queryset
        self._using = using
        self._local = threading.local()

    def get(self, pk: int) -> M:
        compiled = self._compiled()
        with compiled.connection.cursor() as cursor:
            cursor.execute(compiled.sql, [pk])
            row = cursor.fetchone()
        model = compiled.model
        if row is None:
            missing: type[ObjectDoesNotExist] = model.DoesNotExist  # type: ignore[attr-defined]
            raise missing(f"{model._meta.object_name} matching query does not exist.")
        converted = next(iter(compiled.compiler.results_iter([[row]])))  # the field converters, as the ORM's
        obj = model.from_db(self._using, compiled.init_list, converted[compiled.start : compiled.end])
        for populator in compiled.populators:
            populator.populate(converted, obj)
        return obj

    def _compiled(self) -> _Compiled[M]:
        connection = connections[self._using]
        compiled: _Compiled[M] | None = getattr(self._local, "compiled", None)
        if compiled is None or compiled.connection is not connection:
            compiled = self._local.compiled = self._compile(connection)
        return compiled

    def _compile(self, connection: BaseDatabaseWrapper) -> _Compiled[M]:
        queryset = self._queryset().filter(pk=_PROBE_PK).order_by()  # as QuerySet.get: no ordering
        compiler = queryset.query.get_compiler(using=self._using)
        sql, params = compiler.as_sql()
        if list(params) != [_PROBE_PK]:
            raise ValueError(
                f"CompiledGet needs a read whose only parameter is the primary key; this one has {params!r}"
            )
        info: dict[str, Any] = compiler.klass_info or {}
        fields = info["select_fields"]
        start, end = fields[0], fields[-1] + 1
        init_list = [column[0].target.attname for column in compiler.select[start:end]]
        return _Compiled(
            model=queryset.model,
            connection=connection,
            compiler=compiler,
            sql=sql,
            init_list=init_list,
            start=start,
            end=end,
            # (django-stubs describe Django 6's signature, with fetch_mode; this is 5.2's)
            populators=get_related_populators(info, compiler.select, self._using),  # type: ignore[call-arg]
        )
