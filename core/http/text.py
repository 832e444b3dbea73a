"""Text a client sends that Postgres cannot store, found before it reaches a query.

Postgres ``text`` holds no NUL character (psycopg raises ``DataError``; message contents escape it,
``core.nul_text``, so only other text is refused), and a lone UTF-16 surrogate (JSON's
``"\\ud800"`` without its pair) cannot be encoded as UTF-8 (``UnicodeEncodeError``): both were 500s. Every
text field of both APIs is checked here once: ``core.http.fields.StrictCharField`` on ``/api``, the request parser on
``/v1``.
"""

from __future__ import annotations

MAX_ECHOED_CHARS = 80
"""Longest piece of a client's text that an error message repeats (a field name, say)."""


def text_problem(value: str, *, nul_ok: bool = False) -> str | None:
    """What makes ``value`` unstorable, as the end of a sentence that says what to fix; None when it is fine.

    ``nul_ok``: the text goes to a column that stores NUL losslessly (``core.nul_text``: message contents)."""
    nul = -1 if nul_ok else value.find("\x00")
    if nul >= 0:
        return f"contains a NUL character (\\u0000) at position {nul}: remove it."
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate (\\u{ord(value[exc.start]):04x}) at position {exc.start}: "
            "send valid Unicode (a surrogate only as half of a pair)."
        )
    return None


def echo(value: object) -> str:
    """``value`` as an error message may quote it: ASCII (escapes for the rest, lone surrogates included, so
    the JSON renderer can always encode it) and at most ``MAX_ECHOED_CHARS`` characters."""
    text = ascii(value)[1:-1] if isinstance(value, str) else ascii(value)
    if len(text) > MAX_ECHOED_CHARS:
        return text[: MAX_ECHOED_CHARS - 1] + "…"
    return text
