"""The ``guard`` moderation backend through the real engine: the package's Celery worker (vLLM, SmolLM2; the
``engine_worker`` fixture ``test_worker_engine.py`` shares) answers the guard's one-step requests for its deployment.

SmolLM2-135M prompted as a classifier is a stand-in, not a guard: this checks that the scores come from the engine
(probabilities, different for different texts), never that they are right (docs/moderation.md)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import pytest

from deployments.tokenizer import get_tokenizer
from moderation.backends import backend_for
from moderation.backends.guard import GuardBackend
from tests.deployment_helpers import ensure_default_deployment

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


@pytest.mark.usefixtures("engine_worker")
def test_the_guard_scores_texts_with_the_engine(settings: Any) -> None:
    ensure_default_deployment(mark_worker=False)  # the worker lists itself ready for the default deployment
    # A check takes ~0.4 s on a busy shared 2-core machine; the long wait only keeps a slower CI from flaking.
    settings.MODERATION = dataclasses.replace(settings.MODERATION, guard_timeout_s=60)
    texts = ["I will kill you and your whole family tonight.", "Can you give me a recipe for banana bread?"]
    get_tokenizer()  # a web process loads it at start; here its ~10 s load would be counted as the check's
    started = time.monotonic()
    threat, recipe = backend_for("guard").classify(texts)
    elapsed = time.monotonic() - started
    print(f"guard: 2 texts in {elapsed * 1000:.0f} ms; scores {threat.category_scores} / {recipe.category_scores}")
    for result in (threat, recipe):
        assert result.backend == "guard"
        assert set(result.category_scores) == set(backend_for("guard").judges)
        (score,) = set(result.category_scores.values())  # one question, one score, on each category it asks about
        assert 0.0 < score < 1.0
    assert threat.category_scores != recipe.category_scores  # the engine's answer depends on the text
    print_cost_per_check(GuardBackend(settings.MODERATION), texts)


def print_cost_per_check(backend: GuardBackend, texts: list[str]) -> None:
    """The figures docs/moderation.md quotes (printed with ``-s``, never asserted): one check at a time, and eight
    at once (one request: the engine batches their prefills)."""
    single = []
    for index in range(6):
        started = time.monotonic()
        backend.classify([texts[index % 2]])
        single.append((time.monotonic() - started) * 1000)
    started = time.monotonic()
    backend.classify([f"Text {index}: how do I bake bread at home?" for index in range(8)])
    eight = (time.monotonic() - started) * 1000
    deployment = backend.deployment()
    tokens = len(get_tokenizer().encode(backend.prompts(texts[:1], deployment)[0]))
    median = statistics.median(single)
    print(f"guard prompt: {tokens} tokens; one check: median {median:.0f} ms (min {min(single):.0f})")
    print(f"guard: 8 texts in one request: {eight:.0f} ms ({eight / 8:.0f} ms a text)")
