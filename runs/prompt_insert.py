"""The one SQL statement that stores a prompt: the chat's ownership check and row lock, its ``updated_at`` and
title, the user message and the queued run, all in a single round trip.

``POST /api/chats/{id}/messages`` had paid about a dozen statements for this (the chat read, ``BEGIN``,
``SELECT ... FOR UPDATE``, the active-run check, two inserts, the chat update, ``COMMIT``). One statement
with data-modifying CTEs needs no transaction of its own (a statement is atomic: all of it is written or none of
it). It still serializes concurrent prompts to one chat, because the ``UPDATE`` of the chat row takes the same
row lock ``SELECT ... FOR UPDATE`` took (and ``chat_delete`` takes).

- ``target``: the chat if ``owner`` owns it (no row: missing or another user's, answered 404), with whether it
  has an unfinished run (``busy``: answered 409, nothing written).
- ``touched``: bumps ``updated_at``, sets the title if the chat had none and its ``model`` if the prompt named
  one; it waits for the row lock, and
  finds no row when the chat was deleted meanwhile (then nothing else is written either: 404).
- ``message``, ``run``: the inserts, each only if the step before it wrote its row.

All CTEs read one snapshot, so ``busy`` cannot see a run that a concurrent prompt committed while this statement
waited for the lock; the partial unique index ``one_active_run_per_chat`` refuses that second run (an
``IntegrityError`` the caller answers 409, and the statement writes nothing).

The column lists and values come from the models' fields (``pre_save``, ``get_db_prep_save``), as the ORM's own
``INSERT`` would build them, so a field added to ``Message`` or ``Run`` is written here too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection, models

from chats.models import Chat, Message
from runs.models import ACTIVE_STATUSES, Run


@dataclass(frozen=True)
class PromptInsert:
    """What the statement did: ``found`` (the chat is the owner's and still exists), ``busy`` (it has an
    unfinished run: nothing written), the new rows' ids (None when nothing was written) and the chat's
    ``last_worker`` (the worker of its previous turn, which chat affinity routes the run to; "" when none)."""

    found: bool
    busy: bool
    message_id: int | None
    run_id: int | None
    last_worker: str = ""
    chat_id: int | None = None
    """The chat's id when the statement created it (:func:`prompt_insert_new_chat`)."""


@functools.cache
def _insert_shape(
    model: type[models.Model], sourced: frozenset[str], vendor: str
) -> tuple[tuple[models.Field[Any, Any], ...], str, str]:
    """The fields ``_insert_select`` writes of ``model``, its column list and its typed placeholders: the same for
    every prompt, so built once per process (about 40 fields' ``cast_db_type`` a prompt, otherwise)."""
    quote = connection.ops.quote_name
    fields = tuple(
        field
        for field in model._meta.concrete_fields
        if not field.primary_key and field.attname not in sourced and field.column is not None
    )
    columns = ", ".join(quote(str(field.column)) for field in fields)
    # An INSERT ... SELECT types its expressions before assigning them: cast each to its column's type.
    selects = ", ".join(f"%s::{field.cast_db_type(connection)}" for field in fields)
    return fields, columns, selects


def _insert_select(obj: models.Model, *, sourced: Iterable[str] = ()) -> tuple[str, str, list[Any]]:
    """``obj``'s columns and ``SELECT`` expressions (typed placeholders) as the ORM would insert it.

    ``sourced`` names attributes (``user_message_id``) left out here: the caller appends them from a CTE.
    """
    fields, columns, selects = _insert_shape(type(obj), frozenset(sourced), connection.vendor)
    params = [field.get_db_prep_save(field.pre_save(obj, add=True), connection) for field in fields]
    return columns, selects, params


def prompt_insert(
    *,
    chat_id: int,
    owner_id: int,
    title: str,
    message: Message,
    run: Run,
    model: str | None = None,
    temperature_from_chat: bool = False,
) -> PromptInsert:
    """Writes ``message`` and ``run`` (unsaved instances; ``run.user_message`` is set from the new message) to
    the owner's chat ``chat_id`` in one statement, as the module describes; sets their ``pk`` when written.

    ``title`` becomes the chat's title if it has none; ``model`` (not None) its model. ``temperature_from_chat``:
    the run takes the chat's ``temperature`` setting when it has one (else ``run.temperature``), read by the same
    statement (``run.temperature`` is set to what was written). Raises ``IntegrityError``
    (``one_active_run_per_chat``) when a concurrent prompt's run won the chat first.
    """
    low, high = connection.ops.integer_field_range("BigAutoField")
    if not low <= chat_id <= high:  # no such id can exist (and Postgres would refuse it as a bigint)
        return PromptInsert(found=False, busy=False, message_id=None, run_id=None)
    quote = connection.ops.quote_name
    chat_table, message_table, run_table = (quote(m._meta.db_table) for m in (Chat, Message, Run))
    message_cols, message_selects, message_params = _insert_select(message)
    sourced = ["user_message_id", "temperature"]
    run_cols, run_selects, run_params = _insert_select(run, sourced=sourced)
    chat_temperature = "touched.temperature" if temperature_from_chat else "NULL"
    statuses = ", ".join(["%s"] * len(ACTIVE_STATUSES))
    # Only table and column names (the models') are formatted in; every value is a parameter.
    sql = f"""
        WITH target AS (
            SELECT EXISTS (SELECT 1 FROM {run_table} WHERE chat_id = %s AND status IN ({statuses})) AS busy
            FROM {chat_table} WHERE id = %s AND owner_id = %s
        ), touched AS (
            UPDATE {chat_table} SET updated_at = %s, title = CASE WHEN title = '' THEN %s ELSE title END,
                model = COALESCE(%s::varchar, model)
            WHERE id = %s AND owner_id = %s AND NOT (SELECT busy FROM target)
            RETURNING id, temperature, last_worker
        ), message AS (
            INSERT INTO {message_table} ({message_cols}) SELECT {message_selects} FROM touched RETURNING id
        ), run AS (
            INSERT INTO {run_table} ({run_cols}, user_message_id, temperature)
            SELECT {run_selects}, message.id, COALESCE({chat_temperature}, %s::double precision)
            FROM message, touched
            RETURNING id, temperature
        )
        SELECT target.busy, (SELECT id FROM message), (SELECT id FROM run), (SELECT temperature FROM run),
            (SELECT last_worker FROM touched)
        FROM target
    """  # noqa: S608
    params: list[Any] = [
        chat_id,
        *(str(s) for s in ACTIVE_STATUSES),
        chat_id,
        owner_id,
        message.created_at,
        title,
        model,
        chat_id,
        owner_id,
        *message_params,
        *run_params,
        run.temperature,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return PromptInsert(found=False, busy=False, message_id=None, run_id=None)
    busy, message_id, run_id, temperature, last_worker = row
    if message_id is not None:
        run.temperature = temperature
        message.pk = message_id
        message._state.adding = False
        run.user_message_id = message_id
        run.pk = run_id
        run._state.adding = False
    return PromptInsert(
        found=busy or message_id is not None,
        busy=bool(busy),
        message_id=message_id,
        run_id=run_id,
        last_worker=last_worker or "",
    )


def prompt_insert_new_chat(*, chat: Chat, message: Message, run: Run) -> PromptInsert:
    """Writes ``chat`` (unsaved: a chat of its own for an OpenAI-compatible call), ``message`` and ``run`` in one
    statement, the message and the run in the new chat; sets the three ``pk`` (and the rows' ``chat_id``).

    The statement that creates the chat writes the prompt too: no transaction, no ``BEGIN``, ``INSERT`` and
    ``COMMIT`` around it (four statements before). A new chat has no run to be busy with and no lock to wait for."""
    quote = connection.ops.quote_name
    chat_table, message_table, run_table = (quote(m._meta.db_table) for m in (Chat, Message, Run))
    chat_cols, chat_selects, chat_params = _insert_select(chat)
    message_cols, message_selects, message_params = _insert_select(message, sourced=["chat_id"])
    run_cols, run_selects, run_params = _insert_select(run, sourced=["chat_id", "user_message_id"])
    # Only table and column names (the models') are formatted in; every value is a parameter.
    sql = f"""
        WITH chat AS (
            INSERT INTO {chat_table} ({chat_cols}) SELECT {chat_selects} RETURNING id, last_worker
        ), message AS (
            INSERT INTO {message_table} ({message_cols}, chat_id) SELECT {message_selects}, chat.id FROM chat
            RETURNING id
        ), run AS (
            INSERT INTO {run_table} ({run_cols}, chat_id, user_message_id)
            SELECT {run_selects}, chat.id, message.id FROM chat, message
            RETURNING id
        )
        SELECT chat.id, (SELECT id FROM message), (SELECT id FROM run), chat.last_worker FROM chat
    """  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, [*chat_params, *message_params, *run_params])
        chat_id, message_id, run_id, last_worker = cursor.fetchone()
    for obj, pk in ((chat, chat_id), (message, message_id), (run, run_id)):
        obj.pk = pk
        obj._state.adding = False
    message.chat_id = run.chat_id = chat_id
    run.user_message_id = message_id
    return PromptInsert(
        found=True, busy=False, message_id=message_id, run_id=run_id, last_worker=last_worker or "", chat_id=chat_id
    )
