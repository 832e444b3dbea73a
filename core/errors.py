"""Turns domain errors and malformed requests into clear 4xx JSON answers.

Every error body has one shape: ``{"error": {"code": str, "message": str, "fields"?: {...}}}``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler


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
    if isinstance(exc, DomainError):
        return Response(
            {"error": {"code": exc.code, "message": exc.message}},
            status=exc.status_code,
            headers=exc.headers,
        )
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {
                "error": {
                    "code": "request_too_large",
                    "message": f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
                }
            },
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
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


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: JSON under ``/api/`` (clients parse every answer there), Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": {"code": "not_found", "message": "No such endpoint."}}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: JSON under ``/api/``, Django's page elsewhere. The exception is logged by Django."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": {"code": "server_error", "message": "Internal server error."}}, status=500)
    return defaults.server_error(request)
