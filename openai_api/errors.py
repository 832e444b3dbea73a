"""Errors in OpenAI's shape, so the official clients raise their usual exceptions (``BadRequestError``,
``AuthenticationError``, ``NotFoundError``, ``RateLimitError`` with ``Retry-After`` honoured...)."""

from __future__ import annotations

from django.http import JsonResponse

from core.errors import DomainError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


class OpenAIRequestError(Exception):
    """A request the API refuses: ``status`` and a message that says what to fix, naming ``param`` if any."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status


def error_body(message: str, *, status: int, code: str | None = None, param: str | None = None) -> dict[str, object]:
    return {"error": {"message": message, "type": _TYPES.get(status, "server_error"), "param": param, "code": code}}


def error_response(
    message: str,
    *,
    status: int,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JsonResponse:
    return JsonResponse(error_body(message, status=status, code=code, param=param), status=status, headers=headers)


def from_request_error(exc: OpenAIRequestError) -> JsonResponse:
    return error_response(exc.message, status=exc.status, code=exc.code, param=exc.param)


def from_domain_error(exc: DomainError) -> JsonResponse:
    """Our services' errors (400 too long, 429 with ``Retry-After``, 503) keep their status, code and headers."""
    return error_response(exc.message, status=exc.status_code, code=exc.code, headers=exc.headers or None)
