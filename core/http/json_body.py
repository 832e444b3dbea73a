"""JSON request bodies within bounds: their size checked before they are read, their nesting before they are parsed.

Python's ``json`` module recurses once per level of nesting, so a body of 10,000 ``[`` was a ``RecursionError``
(a 500) on every JSON endpoint, before authentication. Both APIs read bodies through here: ``/api`` through
``core.http.parsers.BoundedJSONParser`` (DRF), ``/v1`` through ``openai_api.requests.read_body``; each answers the
errors in its own shape (400 for JSON that is malformed or too deep, 413 for a body that is too large).
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

from django.conf import settings

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects a body may have. The deepest real body (``/v1`` text parts) needs 4."""

DEFAULT_MAX_BODY_BYTES = 2_621_440
"""Used when ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is None (no limit there): the bodies here are never that large."""

# A JSON string from its opening quote to its closing one, or to the end of an unterminated one. Possessive
# quantifiers: no backtracking, so the scan is linear whatever the text.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\Z)', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]++")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 for an opening bracket, -1 (as a signed byte) for a closing


class JsonBodyError(Exception):
    """A request body refused before it reached a view: not JSON, nested too deeply (400), or too large (413).

    Not a ``core.errors.DomainError``: DRF imports the parser (and so this module) while ``core.errors`` is
    still being imported; the exception handler there answers both alike.
    """

    def __init__(self, message: str, *, code: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status_code = status_code
        self.headers: dict[str, str] = {}


def max_body_bytes() -> int:
    """The largest body any endpoint reads: Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return DEFAULT_MAX_BODY_BYTES if limit is None else int(limit)


def too_large() -> JsonBodyError:
    """The 413 for a body over ``max_body_bytes()``; also the answer to Django's own ``RequestDataTooBig``."""
    return JsonBodyError(
        f"The request body is larger than {max_body_bytes()} bytes; send a smaller one.",
        code="request_too_large",
        status_code=413,
    )


def check_declared_length(meta: Mapping[str, Any]) -> None:
    """Refuses a body whose ``Content-Length`` is over the limit before a byte of it is read."""
    try:
        declared = int(meta.get("CONTENT_LENGTH") or 0)
    except (TypeError, ValueError):
        return  # the server reads what comes; read_limited still counts it
    if declared > max_body_bytes():
        raise too_large()


def nesting_depth(text: str) -> int:
    """How deeply arrays and objects nest in the JSON ``text``, found without parsing it (linear, no recursion).

    Strings are cut out first (their brackets do not count); what is left of valid JSON is ASCII, and its
    brackets become +1/-1 steps whose highest running sum is the depth.
    """
    if "[" not in text and "{" not in text:
        return 0
    brackets = _NOT_A_BRACKET.sub("", _STRING.sub("", text)).encode("ascii").translate(_STEPS)
    return max(0, max(accumulate(array("b", brackets)), default=0))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json(raw: bytes, *, encoding: str = "utf-8", invalid_code: str = "parse_error") -> Any:
    """The JSON value of a request body; :class:`JsonBodyError` when it is too large, not text in ``encoding``,
    nested deeper than ``MAX_JSON_DEPTH`` or not JSON (code ``invalid_code``)."""
    if len(raw) > max_body_bytes():
        raise too_large()
    try:
        text = raw.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        raise JsonBodyError(
            f"The body is not {encoding} text; send JSON encoded as UTF-8.", code=invalid_code
        ) from None
    depth = nesting_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise JsonBodyError(
            f"The JSON body nests arrays and objects {depth} levels deep; the limit is {MAX_JSON_DEPTH}. "
            "Send a flatter body.",
            code="json_too_deep",
        )
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise JsonBodyError(f"The body is not valid JSON ({exc}); send one JSON object.", code=invalid_code) from None
    except ValueError as exc:  # NaN/Infinity, or an integer longer than Python converts (4,300 digits)
        detail = str(exc) if "JSON value" in str(exc) else "a number has too many digits"
        raise JsonBodyError(
            f"The body is not valid JSON ({detail}); send one JSON object.", code=invalid_code
        ) from None
