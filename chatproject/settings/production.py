"""Production settings: ``DJANGO_SETTINGS_MODULE=chatproject.settings.production`` (docs/security.md).

Everything in ``base`` (read from the environment), plus what ``python manage.py check --deploy`` asks for: no
debug, a real secret key (required: the settings refuse to load without one), cookies only over HTTPS, HSTS and
an HTTPS redirect. TLS is assumed to end at a reverse proxy in front of the web processes, which sets
``X-Forwarded-Proto`` (overwriting whatever the client sent).
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from chatproject.settings.base import *  # noqa: F403
from chatproject.settings.base import env

DEBUG = False  # whatever DJANGO_DEBUG says

SECRET_KEY = env.str("DJANGO_SECRET_KEY")
_KNOWN_DEFAULTS = {"dev-insecure-change-me", "change-me-in-production"}
if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY in _KNOWN_DEFAULTS:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be a random string of at least 50 characters in production, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(64))'"
    )

# HTTPS: behind the proxy, X-Forwarded-Proto says whether the client's request was HTTPS.
BEHIND_TLS_PROXY = env.bool("DJANGO_SECURE_PROXY_SSL_HEADER", default=True)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
# Probes and scrapers inside the network talk plain HTTP to a web process: no redirect for them.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
