"""Helpers shared by the browser tests."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.test import Client

from accounts.models import User


def sign_in(context: Any, user: User, base_url: str) -> None:
    """Gives the browser context a real session cookie for ``user`` (the login form has its own test)."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie.value, "url": base_url}])
