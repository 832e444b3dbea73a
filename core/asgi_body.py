"""Django's ASGI handler, giving a request sent without ``Content-Length`` (``Transfer-Encoding: chunked``) the length
of the body it read.

Django's ``ASGIHandler`` reads the whole body into a file before it builds the request, whatever the framing. DRF,
though, takes a request without ``Content-Length`` for one without a body (``Request._load_stream``), and so does
Django's form parsing: a chunked ``POST /api/chats {"title": ...}`` made a chat with no title, a chunked prompt was
"content required", a chunked body over the limit was read as empty instead of a 413, and a chunked sign-in failed.
Here the length of the body already read becomes the request's ``CONTENT_LENGTH``, so every parser reads it and the
size checks (``core.http.json_body.check_declared_length``, Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``) see its real
size. A request that declares its length is left as it is: one scan of its few headers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import IO, Any

from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.http.response import HttpResponseBase

from core.middleware import on_loop_classes


class WholeBodyASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        """Django's loading of ``settings.MIDDLEWARE``, with Django's own middleware as their subclasses that run the
        hooks doing no I/O on the event loop (``core.middleware``)."""
        with on_loop_classes():
            super().load_middleware(is_async)

    def create_request(
        self, scope: Mapping[str, Any], body_file: IO[bytes]
    ) -> tuple[ASGIRequest, None] | tuple[None, HttpResponseBase]:
        headers = scope.get("headers") or []
        if not any(name == b"content-length" for name, _ in headers):  # ASGI header names are lower case
            size = body_file.seek(0, os.SEEK_END)
            body_file.seek(0)
            if size:
                scope = {**scope, "headers": [*headers, (b"content-length", str(size).encode())]}
        return super().create_request(scope, body_file)
