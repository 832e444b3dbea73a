"""Text with NUL characters in a Postgres ``text`` column, stored losslessly.

Postgres ``text`` cannot hold U+0000 (psycopg raises ``DataError``), yet prompts may carry one: vLLM's server serves
them (its benchmark's random dataset has such prompts), and refusing them lost requests. ``NulSafeTextField``
stores a NUL as the private-use character U+E000 followed by ``0``, and a U+E000 of the text itself as U+E000
twice, so every string round-trips exactly; text with neither character (nearly all of it) is stored as it is,
byte for byte. Reads through the ORM (``values_list`` included) decode; SQL that reads the column directly (full
text search, ``LIKE``) sees the escaped form, which differs from the text only where a NUL or U+E000 was.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import models

ESCAPE = "\ue000"
"""The escape character: the first of Unicode's private-use area, meaningless in interchanged text."""

_ENCODE = re.compile("[\x00\ue000]")
_DECODE = re.compile("\ue000(.)", re.DOTALL)


def nul_escape(text: str) -> str:
    """``text`` as stored: NUL → U+E000 ``0``, U+E000 → U+E000 U+E000; anything else unchanged."""
    if "\x00" not in text and ESCAPE not in text:
        return text
    return _ENCODE.sub(lambda m: ESCAPE + "0" if m.group(0) == "\x00" else ESCAPE + ESCAPE, text)


def nul_unescape(stored: str) -> str:
    """The text ``nul_escape`` stored as ``stored``."""
    if ESCAPE not in stored:
        return stored
    return _DECODE.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), stored)


class NulSafeTextField(models.TextField):  # type: ignore[type-arg]
    """A ``TextField`` whose values may contain NUL (see the module)."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return nul_escape(value) if isinstance(value, str) else value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return nul_unescape(value) if isinstance(value, str) else value
