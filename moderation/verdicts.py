"""A policy's decision on one text: the backend's scores against the policy's threshold, after its allow-list."""

from __future__ import annotations

import functools
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from moderation.backends import backend_for


@dataclass(frozen=True)
class Verdict:
    """What a moderation pass decided about one text (what the run records, what ``violation_record`` stores).

    ``categories``/``scores`` hold the categories the backend judges (see ``moderation.backends``); ``flagged`` is
    True when any score is above the policy's threshold. ``ms`` is the time the check took (allow-list and
    classifier), ``reason`` says in words why it flagged, or why nothing was checked."""

    flagged: bool
    categories: dict[str, bool] = field(hash=False)
    scores: dict[str, float] = field(hash=False)
    backend: str
    ms: float
    reason: str = ""

    @property
    def flagged_categories(self) -> list[str]:
        return [name for name, hit in self.categories.items() if hit]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (a run's recorded decision, an event's payload)."""
        return {**asdict(self), "flagged_categories": self.flagged_categories}

    @classmethod
    def unchecked(cls, reason: str) -> Verdict:
        """Nothing was checked (the policy turns this direction off): not flagged, no scores."""
        return cls(flagged=False, categories={}, scores={}, backend="off", ms=0.0, reason=reason)


@functools.lru_cache(maxsize=256)
def allow_pattern(allow_list: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern for every allowed term or phrase: whole words, any case, any run of whitespace between the
    words of a phrase (``"breast  cancer"`` is ``breast cancer``). None for an empty list."""
    phrases = sorted({p.strip() for p in allow_list if p.strip()}, key=len, reverse=True)  # longest first
    if not phrases:
        return None
    alternatives = (r"\s+".join(re.escape(word) for word in phrase.split()) for phrase in phrases)
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


def without_allowed(text: str, allow_list: tuple[str, ...]) -> str:
    """The text with every allowed term taken out: what is classified. The allowed words themselves can then never
    flag, while the rest of the text is judged as usual (an insult next to a medical term still flags)."""
    pattern = allow_pattern(allow_list)
    return text if pattern is None else pattern.sub(" ", text)


def judge(text: str, *, backend: str, threshold: float, allow_list: tuple[str, ...] = ()) -> Verdict:
    """Classifies ``text`` with ``backend`` and flags the categories scored above ``threshold``.

    Raises ``ModerationUnavailable`` when the backend cannot answer."""
    started = time.perf_counter()
    checked = without_allowed(text, allow_list)
    if not checked.strip():  # nothing left but allowed terms (or nothing at all)
        reason = "only allowed terms" if text.strip() else "empty text"
        return Verdict(flagged=False, categories={}, scores={}, backend=backend, ms=_ms(started), reason=reason)
    (result,) = backend_for(backend).classify([checked])
    categories = {name: score > threshold for name, score in result.category_scores.items()}
    hits = [f"{name} {result.category_scores[name]:.2f} > {threshold:.2f}" for name, hit in categories.items() if hit]
    return Verdict(
        flagged=bool(hits),
        categories=categories,
        scores=dict(result.category_scores),
        backend=result.backend,
        ms=_ms(started),
        reason="; ".join(hits),
    )


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
