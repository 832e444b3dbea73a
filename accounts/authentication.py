"""The API's token authentication: one query per token (user, tier and limit override together), then a few
seconds in this process's memory.

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


class CachedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``, as DRF's, with the read described in the module docstring."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        ttl = settings.API_TOKEN_CACHE_S
        now = time.monotonic()
        hit = _cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        token = token_read(key)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user: User = token.user
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        if ttl > 0:
            with _cache_lock:
                _cache.pop(key, None)
                _cache[key] = (now + ttl, user, token)
                while len(_cache) > MAX_CACHED_TOKENS:
                    del _cache[next(iter(_cache))]
        return user, token
