"""The moderation backends, chosen by name (a tier policy's ``backend``, ``/v1/moderations``' ``model``).

* ``local`` (:mod:`moderation.backends.local`): alt-profanity-check in process; judges ``harassment`` only.
* ``http`` (:mod:`moderation.backends.http`): a server speaking OpenAI's moderation API; judges what it answers.

A guard model served as a deployment of this platform (Llama Guard, Qwen3Guard) is not a backend yet:
docs/moderation.md "Guard model" says what it needs from the workers.
"""

from __future__ import annotations

from django.conf import settings

from moderation.backends import http, local
from moderation.backends.base import CATEGORIES, ModerationBackend, ModerationResult, ModerationUnavailable

BACKEND_NAMES: tuple[str, ...] = (local.NAME, http.NAME)

__all__ = [
    "BACKEND_NAMES",
    "CATEGORIES",
    "ModerationBackend",
    "ModerationResult",
    "ModerationUnavailable",
    "backend_for",
    "default_backend_name",
]

_local = local.LocalBackend()


def default_backend_name() -> str:
    """``MODERATION_BACKEND``."""
    return settings.MODERATION.backend


def backend_for(name: str) -> ModerationBackend:
    """The backend called ``name`` (``default``: ``MODERATION_BACKEND``); :class:`ModerationUnavailable` for a
    name no backend has (a setting's typo must not pass every text as clean)."""
    if name == "default":
        name = default_backend_name()
    if name == local.NAME:
        return _local
    if name == http.NAME:
        return http.HttpBackend(settings.MODERATION)  # read per call: tests and operators change the settings
    raise ModerationUnavailable(f"No moderation backend is called {name!r} (known: {', '.join(BACKEND_NAMES)}).")
