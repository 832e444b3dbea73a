"""``http``: any server speaking OpenAI's moderation API (``POST {base}/moderations``): OpenAI itself, a
self-hosted guard behind an OpenAI-shaped facade, or another installation of this project (``/v1/moderations``).

The server decides which categories it judges; this backend takes the categories its answer carries (OpenAI's
answer carries all thirteen) and ignores names it does not know. Timeouts, refused connections, non-2xx answers
and malformed bodies are :class:`ModerationUnavailable` (503), never a text passed as clean.
"""

from __future__ import annotations

from typing import Any

import httpx

from core.config import ModerationConfig
from moderation.backends.base import CATEGORIES, ModerationResult, ModerationUnavailable

NAME = "http"
JUDGES: tuple[str, ...] = CATEGORIES


class HttpBackend:
    name = NAME
    judges = JUDGES

    def __init__(self, config: ModerationConfig) -> None:
        self.url = config.http_url.rstrip("/") + "/moderations" if config.http_url else ""
        self.key = config.http_key
        self.model = config.http_model
        self.timeout_s = config.http_timeout_s

    def classify(self, texts: list[str]) -> list[ModerationResult]:
        if not texts:
            return []
        if not self.url:
            raise ModerationUnavailable("The HTTP moderation backend has no MODERATION_HTTP_URL configured.")
        body: dict[str, Any] = {"input": texts}
        if self.model:
            body["model"] = self.model
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        try:
            answer = httpx.post(self.url, json=body, headers=headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise ModerationUnavailable(
                f"The moderation server at {self.url} did not answer ({type(exc).__name__})."
            ) from exc
        if answer.status_code != 200:
            raise ModerationUnavailable(
                f"The moderation server at {self.url} answered {answer.status_code}: {answer.text[:200]}"
            )
        return _results(answer, expected=len(texts), url=self.url)


def _results(answer: httpx.Response, *, expected: int, url: str) -> list[ModerationResult]:
    try:
        results = answer.json()["results"]
        if not isinstance(results, list) or len(results) != expected:
            raise ValueError(f"{expected} results expected")
        return [_result(item) for item in results]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModerationUnavailable(
            f"The moderation server at {url} sent an answer not in OpenAI's shape ({exc})."
        ) from exc


def _result(item: dict[str, Any]) -> ModerationResult:
    scores = item.get("category_scores") or {}
    categories = item.get("categories") or {}
    known = [name for name in CATEGORIES if name in scores or name in categories]
    return ModerationResult(
        flagged=bool(item["flagged"]),
        categories={name: bool(categories.get(name, False)) for name in known},
        category_scores={name: float(scores.get(name, 0.0)) for name in known},
        backend=NAME,
    )
