"""Reads of users."""

from __future__ import annotations

from typing import cast

from rest_framework.authtoken.models import Token
from rest_framework.request import Request

from accounts.models import User


def token_read(key: str) -> Token | None:
    """The API token with its user, the user's tier and limit override (one query), or None."""
    return Token.objects.select_related("user__tier", "user__limit_override").filter(key=key).first()


def request_user(request: Request) -> User:
    """The authenticated user of a DRF request (the permission classes have already refused anonymous ones)."""
    return cast(User, request.user)
