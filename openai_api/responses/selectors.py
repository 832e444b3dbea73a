"""Reads of stored responses: always by owner and ``store`` (another user's response, or an unstored one, is not
found), never by anything a caller could enumerate."""

from __future__ import annotations

from accounts.models import User
from openai_api.responses.models import ResponseRecord


def response_record_get(*, user: User, public_id: str) -> ResponseRecord | None:
    """The caller's stored response ``public_id``, with its run and answer; None for any other id."""
    return (
        ResponseRecord.objects.select_related("run", "run__user", "run__assistant_message", "run__chat")
        .filter(public_id=public_id, run__user=user, run__store=True)
        .first()
    )


def response_record_reload(*, record_id: int) -> ResponseRecord:
    """The record as Postgres has it now (its run's end, counts and answer included)."""
    return ResponseRecord.objects.select_related("run", "run__user", "run__assistant_message").get(pk=record_id)
