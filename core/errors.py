"""Turns domain errors and malformed requests into clear 4xx JSON answers.

Every error body has one shape: ``{"error": {"code": str, "message": str, "fields"?: {...}}}``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from core.http.json_body import JsonBodyError, too_large


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
    ) -> None:
        super().__init__(message)
        self.message = message
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
            {"error": {"code": exc.code, "message": exc.message}},
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


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: JSON on the APIs, Django's page elsewhere. The exception is logged by Django."""
    answer = _json_error(request, status=500, code="server_error", message="Internal server error.")
    return answer if answer is not None else defaults.server_error(request)
