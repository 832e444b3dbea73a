"""The API's token authentication: one query per token (user, tier and limit override together), then a few
seconds in this process's memory. DRF's views (``Authorization: Token``) and the async endpoints that authenticate
outside DRF (``/v1``'s ``Authorization: Bearer``, the SSE stream) share the cache: a hit is a dictionary lookup,
which the async ones make on the event loop, with no hop to a database thread.

DRF's ``TokenAuthentication`` reads the token with its user, and the tier and the override were then read
again by every prompt. A refused prompt (429) should cost almost nothing, and most of what a request pays for is
that read and the connection it opens. So a token, once read, is kept for ``API_TOKEN_CACHE_S`` seconds
(0: off) with its user as read then (only active users; an unknown token is read every time).

Staleness, bounded by that TTL in each web process: a deleted token, a deactivated user, or a changed tier
or limit override takes effect within ``API_TOKEN_CACHE_S`` seconds (the admission's token bucket and
concurrency counters themselves are in Redis and always current). The cached ``User`` is shared by the
requests of those seconds: read it, never change it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from accounts.models import User
from accounts.selectors import token_read

MAX_CACHED_TOKENS = 10_000
"""Bounds the memory: the oldest entries go first past this many."""

_cache: dict[str, tuple[float, User, Token]] = {}
_cache_lock = threading.Lock()


def token_cache_clear() -> None:
    """Forgets every cached token (tests; a process that must honour a revocation at once)."""
    with _cache_lock:
        _cache.clear()


def _cached(key: str) -> tuple[User, Token] | None:
    hit = _cache.get(key)
    if hit is not None and hit[0] > time.monotonic():
        return hit[1], hit[2]
    return None


def _remember(key: str, user: User, token: Token) -> None:
    ttl = settings.API_TOKEN_CACHE_S
    if ttl > 0:
        with _cache_lock:
            _cache.pop(key, None)
            _cache[key] = (time.monotonic() + ttl, user, token)
            while len(_cache) > MAX_CACHED_TOKENS:
                del _cache[next(iter(_cache))]


def cached_token_user(key: str) -> User | None:
    """The user of the API token ``key`` while this process's cache holds it (no I/O: an async view calls it on the
    event loop); None when it does not (then :func:`token_user` reads it)."""
    hit = _cached(key)
    return hit[0] if hit is not None else None


def token_user(key: str) -> User | None:
    """The active user the API token ``key`` belongs to (tier and limit override loaded), from the cache or read
    (then cached); None for an unknown token or an inactive user. For the async endpoints that authenticate outside
    DRF (the SSE stream, the OpenAI-compatible ``/v1``), on a database thread."""
    hit = _cached(key)
    if hit is not None:
        return hit[0]
    token = token_read(key)
    if token is None or not token.user.is_active:
        return None
    _remember(key, token.user, token)
    return token.user


class CachedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``, as DRF's, with the read described in the module docstring."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        hit = _cached(key)
        if hit is not None:
            return hit
        token = token_read(key)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user: User = token.user
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        _remember(key, user, token)
        return user, token
