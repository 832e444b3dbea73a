"""Login throttling (django-axes): every password check goes through it, whichever door it comes in by.

``POST /api/auth/token``, ``/login/`` and ``/admin/login/`` all call ``django.contrib.auth.authenticate(request=...)``,
so ``axes.backends.AxesStandaloneBackend`` (first in ``AUTHENTICATION_BACKENDS``) sees every attempt and the
failures land in axes' ``AccessAttempt`` table (Postgres: shared by every web replica).

- Lockout: after ``AUTH_LOCKOUT_FAILURES`` failures within ``AUTH_LOCKOUT_COOLOFF_S`` for one **account**
  (from any address) or from one **client address** (on any account), that account or address is refused for the
  rest of the cool-off, the right password included. The failure that reaches the limit is already answered 429.
- Answer: ``429`` with ``Retry-After`` (seconds until the lockout ends); under ``/api/`` the JSON error shape
  ``{"error": {"code": "login_locked", "message"}}``, elsewhere a short HTML page.
- A successful login clears that **account's** failures only: an address's count keeps the failures on other
  accounts, so a client cannot wipe its guesses by signing in to an account of its own in between.
- Attempts while locked out are refused without being recorded, so the lockout (and ``Retry-After``) ends when it
  said it would.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import (
    get_client_ip_address,
    get_client_parameters,
    get_client_user_agent,
    get_client_username,
    get_cool_off,
    get_failure_limit,
)
from axes.models import AccessAttempt
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils import timezone

LOCKED_CODE = "login_locked"


class LoginAttemptHandler(AxesDatabaseHandler):  # type: ignore[misc]
    """axes' database handler, except that a successful login resets only the account's own failures."""

    def reset_user_attempts(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        username = get_client_username(request, credentials)
        if not username:
            return 0
        count, _ = AccessAttempt.objects.filter(username=username).delete()
        return int(count)


def client_ip(request: HttpRequest) -> str | None:
    """The client's address for the per-address count (``AXES_CLIENT_IP_CALLABLE``).

    ``REMOTE_ADDR`` unless ``AUTH_PROXY_COUNT`` reverse proxies stand in front of the web process: then the entry
    of ``X-Forwarded-For`` that the outermost of them appended (the client as it saw it). Entries further left
    are the client's own word and are never trusted.
    """
    proxies = settings.AUTH_PROXY_COUNT
    if proxies > 0:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    remote = request.META.get("REMOTE_ADDR")
    return str(remote) if remote else None


def retry_after_s(request: HttpRequest, credentials: dict[str, Any] | None) -> int:
    """Seconds until no lockout parameter of this request (its account, its address) is over the limit.

    axes counts a failure row (one per account, address and user agent) while its latest failure is within the
    cool-off: a parameter stays locked until enough of its newest rows have aged out to drop below the limit.
    """
    cool_off: timedelta = get_cool_off(request) or timedelta(0)
    now = timezone.now()
    limit = get_failure_limit(request, credentials)
    ip_address = getattr(request, "axes_ip_address", None) or get_client_ip_address(request)
    filters = get_client_parameters(
        get_client_username(request, credentials), ip_address, get_client_user_agent(request), request, credentials
    )
    ends = []
    for filter_kwargs in filters:
        rows = (
            AccessAttempt.objects.filter(**filter_kwargs, attempt_time__gte=now - cool_off)
            .order_by("-attempt_time")
            .values_list("attempt_time", "failures_since_start")
        )
        failures = 0
        for attempt_time, count in rows:
            failures += count
            if failures >= limit:
                ends.append(attempt_time + cool_off)
                break
    end = max(ends, default=now + cool_off)  # locked by rows we cannot see (a concurrent reset): a whole cool-off
    return max(1, math.ceil((end - now).total_seconds()))


def lockout_response(
    request: HttpRequest, original_response: object = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: 429 with ``Retry-After``, JSON under ``/api/``, a page elsewhere.

    axes' async middleware passes the credentials where the sync one passes the original response, so they are
    read from the request (axes keeps them there) rather than from the arguments.
    """
    credentials = getattr(request, "axes_credentials", None) or credentials
    seconds = retry_after_s(request, credentials)
    minutes = math.ceil(seconds / 60)
    wait = f"{seconds} seconds" if seconds < 120 else f"{minutes} minutes"
    message = f"Too many failed sign-ins for this account or from this address. Try again in {wait}."
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"error": {"code": LOCKED_CODE, "message": message}}, status=429)
    else:
        html = render_to_string("accounts/login_locked.html", {"message": message, "retry_after_s": seconds}, request)
        response = HttpResponse(html, status=429)
    response["Retry-After"] = str(seconds)
    return response
