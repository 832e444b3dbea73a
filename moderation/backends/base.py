"""What every moderation backend answers: one :class:`ModerationResult` per text, in OpenAI's category names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from core.errors import DomainError

CATEGORIES: tuple[str, ...] = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)
"""OpenAI's moderation categories (``omni-moderation-latest``), in the order its API lists them."""


@dataclass(frozen=True)
class ModerationResult:
    """One text's classification by one backend.

    ``categories`` and ``category_scores`` hold only the categories the backend judges (:attr:`ModerationBackend.
    judges`): a category it cannot judge is absent, not ``False``, so a caller never reads "clean" where the backend
    said nothing. ``flagged`` is the backend's own decision at its own threshold; a policy applies its own
    threshold to the scores (``moderation.verdicts``)."""

    flagged: bool
    categories: dict[str, bool] = field(hash=False)
    category_scores: dict[str, float] = field(hash=False)
    backend: str


class ModerationUnavailable(DomainError):
    """The backend could not answer (the HTTP server is down, slow or misconfigured): the text was not checked.
    The caller decides whether that refuses the prompt (fail closed) or lets it through (fail open)."""

    status_code = 503
    code = "moderation_unavailable"


class ModerationBackend(Protocol):
    """A classifier: texts in, one result per text out, same order."""

    name: str
    """The backend's name (``local``, ``http``): a policy's ``backend``, ``/v1/moderations``' ``model``."""
    judges: tuple[str, ...]
    """The categories this backend scores; the others it cannot judge."""

    def classify(self, texts: list[str]) -> list[ModerationResult]:
        """One result per text; :class:`ModerationUnavailable` when the backend cannot answer."""
        ...
