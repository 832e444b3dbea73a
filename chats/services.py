"""Writes to chats. Deleting a chat ends its runs first, so it lives with them (``runs.services.chat_delete``)."""

from __future__ import annotations

from typing import Final

from accounts.models import User
from chats.models import Chat
from deployments.selection import check_model


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()
"""A setting left as it is (None is a value for ``temperature``: the default)."""


def title_from_text(text: str) -> str:
    """A chat's title from its first prompt: the first non-blank line, at most 80 characters, without NUL (a title is
    plain text; only message contents store NUL, ``core.nul_text``)."""
    lines = text.replace("\x00", "").strip().splitlines()
    return lines[0][:80] if lines else ""


def chat_create(*, user: User, title: str = "", model: str = "") -> Chat:
    """A new chat; ``model`` must name a served model (``deployments.selection.check_model``: 400/404 first)."""
    return Chat.objects.create(owner=user, title=title, model=check_model(model))


def chat_update(
    *,
    chat: Chat,
    title: str | None = None,
    model: str | None = None,
    system_prompt: str | None = None,
    temperature: float | _Unset | None = UNSET,
) -> Chat:
    """Renames the chat, changes its model and/or its runs' settings (None, ``UNSET`` for ``temperature``: left
    as it is). ``system_prompt`` ``""`` and ``temperature`` None go back to the server's defaults; both apply to
    the chat's later runs (``chats.context.chat_system_prompt``, ``runs.services.run_create``)."""
    fields = []
    if title is not None:
        chat.title = title
        fields.append("title")
    if model is not None:
        chat.model = check_model(model)
        fields.append("model")
    if system_prompt is not None:
        chat.system_prompt = system_prompt
        fields.append("system_prompt")
    if not isinstance(temperature, _Unset):
        chat.temperature = temperature
        fields.append("temperature")
    if fields:
        chat.save(update_fields=fields)
    return chat
