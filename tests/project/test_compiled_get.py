"""``core.compiled_get.CompiledGet``: the same instances as ``QuerySet.get``, relations loaded, in one statement whose
text does not change from call to call."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from accounts.models import UserLimitOverride
from core.compiled_get import CompiledGet
from runs.models import Run
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db

RELATED = ("tier", "chat", "user_message", "user__tier", "user__limit_override")


def _fields(obj: Model) -> dict[str, Any]:
    return {field.attname: getattr(obj, field.attname) for field in obj._meta.concrete_fields}


def _read() -> CompiledGet[Run]:
    return CompiledGet(lambda: Run.objects.select_related(*RELATED))


def test_the_instance_and_its_relations_match_the_orms_read() -> None:
    run = RunFactory.create()
    UserLimitOverride.objects.create(user=run.user, max_output_tokens=77, note="n")
    read = _read()

    got = read.get(run.pk)
    expected = Run.objects.select_related(*RELATED).get(pk=run.pk)

    assert _fields(got) == _fields(expected)
    with CaptureQueriesContext(connection) as queries:  # every relation came with the row
        assert _fields(got.chat) == _fields(expected.chat)
        assert _fields(got.tier) == _fields(expected.tier)
        assert _fields(got.user_message) == _fields(expected.user_message)
        assert _fields(got.user) == _fields(expected.user)
        assert _fields(got.user.tier) == _fields(expected.user.tier)
        assert got.user.limit_override.max_output_tokens == 77
    assert len(queries) == 0
    assert got._state.db == "default" and not got._state.adding


def test_a_missing_reverse_relation_reads_as_missing_without_a_query() -> None:
    run = RunFactory.create()
    got = _read().get(run.pk)
    with CaptureQueriesContext(connection) as queries:
        with pytest.raises(UserLimitOverride.DoesNotExist):
            got.user.limit_override  # noqa: B018 (the access is the test)
    assert len(queries) == 0


def test_one_statement_a_read_and_the_same_text_every_time() -> None:
    first, second = RunFactory.create(), RunFactory.create()
    read = _read()
    with CaptureQueriesContext(connection) as queries:
        assert read.get(first.pk).pk == first.pk
        assert read.get(second.pk).pk == second.pk
    assert len(queries) == 2
    statements = [query["sql"].replace(str(first.pk), "?").replace(str(second.pk), "?") for query in queries]
    assert statements[0] == statements[1]


def test_a_missing_row_raises_the_models_does_not_exist() -> None:
    with pytest.raises(Run.DoesNotExist):
        _read().get(987_654_321)


def test_a_read_with_parameters_of_its_own_is_refused() -> None:
    read = CompiledGet(lambda: Run.objects.filter(max_tokens=64))
    with pytest.raises(ValueError, match="only parameter is the primary key"):
        read.get(1)


def test_a_changed_row_is_read_as_it_is_now() -> None:
    run = RunFactory.create()
    read = _read()
    read.get(run.pk)
    Run.objects.filter(pk=run.pk).update(max_tokens=99)
    assert read.get(run.pk).max_tokens == 99
