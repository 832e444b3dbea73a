"""Reads of users."""

from __future__ import annotations

from typing import cast

from rest_framework.authtoken.models import Token
from rest_framework.request import Request

from accounts.models import User


def token_read(key: str) -> Token | None:
    """The API token with its user, the user's tier and limit override (one query), or None."""
    return Token.objects.select_related("user__tier", "user__limit_override").filter(key=key).first()


def user_for_token(key: str) -> User | None:
    """The active user an API token belongs to (tier and limit override loaded), or None for an unknown token.

    For the async endpoints that authenticate outside DRF (the SSE stream, the OpenAI-compatible ``/v1``).
    """
    token = token_read(key)
    return token.user if token is not None and token.user.is_active else None


def request_user(request: Request) -> User:
    """The authenticated user of a DRF request (the permission classes have already refused anonymous ones)."""
    return cast(User, request.user)
