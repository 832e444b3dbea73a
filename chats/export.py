"""A chat as a file to download: Markdown for reading, JSON for machines. Pure: the caller loads the rows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from chats.models import Chat, Message

EXPORT_VERSION = 1


def export_filename(chat: Chat, extension: str) -> str:
    """An ASCII file name from the title (``chat-12-my-title.md``): safe in a Content-Disposition header."""
    slug = re.sub(r"[^a-z0-9]+", "-", chat.title.lower()).strip("-")[:60]
    return f"chat-{chat.pk}{'-' + slug if slug else ''}.{extension}"


def export_json(chat: Chat, messages: Iterable[Message]) -> str:
    return json.dumps(
        {
            "version": EXPORT_VERSION,
            "chat": {
                "id": chat.pk,
                "title": chat.title,
                "model": chat.model,
                "system_prompt": chat.system_prompt,
                "temperature": chat.temperature,
                "created_at": chat.created_at.isoformat(),
                "updated_at": chat.updated_at.isoformat(),
            },
            "messages": [
                {"id": m.pk, "role": m.role, "content": m.content, "created_at": m.created_at.isoformat()}
                for m in messages
            ],
        },
        ensure_ascii=False,
        indent=2,
    )


def export_markdown(chat: Chat, messages: Iterable[Message]) -> str:
    lines = [f"# {chat.title or f'Chat {chat.pk}'}", ""]
    if chat.system_prompt:
        lines += ["> System prompt:", *(f"> {line}" for line in chat.system_prompt.splitlines()), ""]
    for m in messages:
        lines += [f"## {m.role.capitalize()} · {m.created_at:%Y-%m-%d %H:%M} UTC", "", m.content, ""]
    return "\n".join(lines)
