"""The ``guard`` backend: its prompt and the mapping from the engine's next-token log probabilities to a score,
without an engine; its configuration; and what it answers when the deployment's workers do not."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from moderation.backends import BACKEND_NAMES, ModerationUnavailable, backend_for
from moderation.backends.guard import (
    DEFAULT_PROMPT,
    GuardBackend,
    guard_user_message,
    label_probabilities,
    result_for,
    unsafe_score,
)
from tests.deployment_helpers import ensure_default_deployment, no_ready_worker


def _configure(settings: Any, **fields: Any) -> None:
    settings.MODERATION = dataclasses.replace(settings.MODERATION, **fields)


def lp(p: float) -> float:
    return math.log(p)


def test_the_text_goes_into_the_prompt_or_alone_for_a_model_template() -> None:
    message = guard_user_message("I will hurt you", "")
    assert message == DEFAULT_PROMPT.replace("{text}", "I will hurt you")
    assert "User: I will hurt you\n<END CONVERSATION>" in message and "'unsafe'" in message
    assert guard_user_message("hello {x}", "Is this unsafe? {text}") == "Is this unsafe? hello {x}"
    assert guard_user_message("as it is", "model") == "as it is"  # Llama Guard's own template wraps it


def test_the_score_is_unsafe_over_both_labels_with_every_spelling_summed() -> None:
    tokens = [(" Safe", lp(0.3)), (" safe", lp(0.1)), ("\n", lp(0.05)), (" unsafe", lp(0.08)), ("UNSAFE", lp(0.02))]
    p_safe, p_unsafe = label_probabilities(tokens)
    assert p_safe == pytest.approx(0.4) and p_unsafe == pytest.approx(0.1)
    assert unsafe_score(tokens) == pytest.approx(0.2)
    # Tokens that only start a label ("Un", "S") are not the label: they count for neither.
    assert unsafe_score([(" Un", lp(0.5)), (" safe", lp(0.2)), (" unsafe", lp(0.2))]) == pytest.approx(0.5)


def test_a_label_missing_from_the_list_is_bounded_by_the_least_listed_token() -> None:
    tokens = [(" safe", lp(0.6)), (" The", lp(0.1)), (" no", lp(0.01))]
    assert label_probabilities(tokens) == (pytest.approx(0.6), pytest.approx(0.01))
    assert unsafe_score(tokens) == pytest.approx(0.01 / 0.61)
    assert unsafe_score([("unsafe", lp(0.9)), ("x", lp(0.001))]) == pytest.approx(0.9 / 0.901)


def test_neither_label_listed_is_unavailable_never_a_score() -> None:
    with pytest.raises(ModerationUnavailable, match="neither 'safe' nor 'unsafe'"):
        unsafe_score([(" The", lp(0.5)), (" I", lp(0.2))])


def test_the_one_score_goes_to_the_categories_the_prompt_asks_about_only() -> None:
    result = result_for(0.8, ("violence", "hate"))
    assert result.flagged and result.backend == "guard"
    assert result.category_scores == {"violence": 0.8, "hate": 0.8}
    assert result.categories == {"violence": True, "hate": True}
    assert not result_for(0.3, ("violence",)).flagged


def test_the_backend_is_chosen_by_name_and_checks_its_categories(settings: Any) -> None:
    assert "guard" in BACKEND_NAMES
    backend = backend_for("guard")
    assert backend.name == "guard" and set(backend.judges) == set(settings.MODERATION.guard_categories)
    _configure(settings, guard_categories=("violence", "violence/graphic"))
    assert backend_for("guard").judges == ("violence", "violence/graphic")
    _configure(settings, guard_categories=("violence", "spam"))
    with pytest.raises(ModerationUnavailable, match="spam"):
        backend_for("guard")


@pytest.mark.django_db
def test_a_guard_deployment_without_a_ready_worker_is_unavailable(settings: Any) -> None:
    row = ensure_default_deployment()
    no_ready_worker(row.key)
    with pytest.raises(ModerationUnavailable, match="no ready worker"):
        GuardBackend(settings.MODERATION).classify(["hello"])
    _configure(settings, guard_model="no-such-guard")
    with pytest.raises(ModerationUnavailable, match="does not exist"):
        backend_for("guard").classify(["hello"])


@pytest.mark.django_db
def test_a_listed_worker_that_never_answers_times_out_as_unavailable(settings: Any) -> None:
    ensure_default_deployment()  # a worker is listed ready, but no process serves the queue
    _configure(settings, guard_timeout_s=0.3)
    with pytest.raises(ModerationUnavailable, match=r"answered the guard within 0\.3 s"):
        backend_for("guard").classify(["hello"])
