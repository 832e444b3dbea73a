"""The one body parser of ``/api`` (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``): DRF's JSON parser with bounds.

DRF's own ``JSONParser`` hands the whole stream to ``json.load``: a deeply nested body is a ``RecursionError``
(500) and a body of any size is read. This one refuses a declared size over the limit before reading, reads at
most one byte past the limit, and checks the nesting before parsing (``core.http.json_body``). Its errors are
``DomainError``s, which ``core.errors.api_exception_handler`` answers in the API's shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from core.http.json_body import check_declared_length, max_body_bytes, parse_json


class BoundedJSONParser(JSONParser):
    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        context = parser_context or {}
        request = context.get("request")
        if request is not None:
            check_declared_length(request.META)
        raw = stream.read(max_body_bytes() + 1)
        return parse_json(raw, encoding=context.get("encoding") or settings.DEFAULT_CHARSET)
