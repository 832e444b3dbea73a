"""Turns domain errors and malformed requests into clear 4xx JSON answers, and an outage of Redis or Postgres
into a 503 with ``Retry-After`` (never a 500).

Every error body has one shape: ``{"error": {"code": str, "message": str, "fields"?: {...}}}``; under ``/v1/``
OpenAI's (``message``, ``type``, ``param``, ``code``).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import redis
from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from django.views import defaults
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from core.db_executor import CONNECTION_ERRORS
from core.http.json_body import JsonBodyError, too_large

logger = logging.getLogger(__name__)

REDIS_OUTAGE_ERRORS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError)
"""Redis not answering: refused or dropped connections, a command past ``REDIS_SOCKET_TIMEOUT_S`` (a paused or
stalled server), a server still loading its data (``BusyLoadingError`` is a ``ConnectionError``), a replica that
refuses writes during a failover."""
OUTAGE_ERRORS: tuple[type[Exception], ...] = (*REDIS_OUTAGE_ERRORS, *CONNECTION_ERRORS)
"""Everything that means a backing service is out (Django's ``OperationalError``/``InterfaceError``: Postgres
unreachable, a dropped connection, the pool's timeout) rather than a fault of the request or of the code."""


class DomainError(Exception):
    """A request that cannot be honoured in the current state; the API answers it with ``status_code``."""

    status_code: int = status.HTTP_400_BAD_REQUEST
    code = "invalid"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status_code: int | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}
        """More for the client, next to ``code`` and ``message`` in the error body (the refused message's id)."""
        if code is not None:
            self.code = code
        if status_code is not None:
            self.status_code = status_code
        self.headers = headers or {}


class ConflictError(DomainError):
    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


class TooManyRequestsError(DomainError):
    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    code = "rate_limited"


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        exc = too_large()
    if isinstance(exc, DomainError | JsonBodyError):
        return Response(
            {"error": {"code": exc.code, "message": exc.message, **getattr(exc, "extra", {})}},
            status=exc.status_code,
            headers=exc.headers,
        )
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        # ObjectDoesNotExist: a row deleted by a concurrent request (e.g. a chat deleted while a prompt is posted).
        exc = exceptions.NotFound("Not found.")
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"error": {"code": "invalid", "message": _flatten(exc.detail), "fields": exc.detail}}
    elif isinstance(exc, exceptions.APIException):
        response.data = {"error": {"code": exc.default_code, "message": str(exc.detail)}}
    return response


def _flatten(detail: Any, prefix: str = "") -> str:
    if isinstance(detail, dict):
        return "; ".join(
            _flatten(value, f"{prefix}{key}: " if key != "non_field_errors" else prefix)
            for key, value in detail.items()
        )
    if isinstance(detail, list):
        return "; ".join(_flatten(value, prefix) for value in detail)
    return f"{prefix}{detail}"


ErrorOutSerializer = inline_serializer(
    name="Error",
    fields={
        "error": inline_serializer(
            name="ErrorDetail",
            fields={
                "code": serializers.CharField(),
                "message": serializers.CharField(help_text="What is wrong, in words a person can act on."),
                "fields": serializers.DictField(required=False, help_text="Per-field messages (validation errors)."),
            },
        )
    },
)


def error_response(description: str) -> OpenApiResponse:
    """An OpenAPI response entry for one of the API's 4xx answers."""
    return OpenApiResponse(response=ErrorOutSerializer, description=description)


def _json_error(request: HttpRequest, *, status: int, code: str, message: str) -> JsonResponse | None:
    """The error as JSON for the programs' paths, None for the others (pages): ``{"error": {"code",
    "message"}}`` under ``/api/``; under ``/v1/`` OpenAI's shape, which has ``type`` and ``param`` too, so the
    official clients read it."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": {"code": code, "message": message}}, status=status)
    if request.path.startswith("/v1/"):
        kind = "server_error" if status >= 500 else "invalid_request_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return JsonResponse(body, status=status)
    return None


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler400``: what Django refuses before a view runs (``SuspiciousOperation``: a body over
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` read outside DRF, a host not allowed...). JSON on the APIs, 413 for a body
    that is too large; Django's page elsewhere."""
    if isinstance(exception, RequestDataTooBig):
        refusal = too_large()
        answer = _json_error(request, status=refusal.status_code, code=refusal.code, message=refusal.message)
    else:
        answer = _json_error(
            request, status=400, code="bad_request", message="The request was refused as malformed or unsafe."
        )
    return answer if answer is not None else defaults.bad_request(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: JSON on the APIs (clients parse every answer there), Django's page elsewhere."""
    answer = _json_error(request, status=404, code="not_found", message="No such endpoint.")
    return answer if answer is not None else defaults.page_not_found(request, exception)


# -- outages --------------------------------------------------------------------------------------------------


def outage_response(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The 503 for a request that met an outage of Redis or Postgres: JSON on the APIs (OpenAI's shape under
    ``/v1/``), plain text elsewhere (pages, ``/metrics``), ``Retry-After`` always."""
    redis_down = isinstance(exc, REDIS_OUTAGE_ERRORS)
    service, code = ("Redis", "redis_unavailable") if redis_down else ("The database", "database_unavailable")
    retry_after = settings.OUTAGES.retry_after_s
    message = f"{service} is not answering (an outage or a restart); try again in {retry_after} s."
    answer: HttpResponse | None = _json_error(request, status=503, code=code, message=message)
    if answer is None:
        answer = HttpResponse(message + "\n", status=503, content_type="text/plain; charset=utf-8")
    answer["Retry-After"] = str(retry_after)
    return answer


class BackendOutageMiddleware(MiddlewareMixin):
    """The one place an outage becomes a 503: any view (DRF re-raises what its handler does not map, the async
    views of the streams and ``/v1`` raise as they are) that raises one of :data:`OUTAGE_ERRORS`."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OUTAGE_ERRORS):
            return None
        logger.warning(
            "%s %s: backing service unavailable (%s: %s); 503",
            request.method,
            request.path,
            type(exception).__name__,
            exception,
        )
        return outage_response(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: JSON on the APIs, Django's page elsewhere. The exception is logged by Django. An outage met
    outside a view (a middleware's own query) is still a 503 where Django hands the exception over: on the
    synchronous path ``handler500`` runs inside Django's ``except``, so ``sys.exc_info()`` holds it."""
    exc = sys.exc_info()[1]
    if isinstance(exc, OUTAGE_ERRORS):
        return outage_response(request, exc)
    answer = _json_error(request, status=500, code="server_error", message="Internal server error.")
    return answer if answer is not None else defaults.server_error(request)
