"""The difficulty classifier: its labelled set, its agreement on held-out families, and weights that a retrain
reproduces."""

from __future__ import annotations

import io
import json
from collections import Counter

from django.core.management import call_command

from model_routing.difficulty import WEIGHTS_PATH, agreement, default_model, is_held_out, labelled_prompts
from model_routing.management.commands.train_difficulty import same_weights
from model_routing.training import train

AGREEMENT_FLOOR = 0.85
"""The held-out agreement the committed weights must keep (0.944 when they were trained, docs/routing.md)."""


def test_the_labelled_set_has_enough_prompts_of_both_labels_and_a_held_out_split_of_unseen_families() -> None:
    prompts = list(labelled_prompts())
    assert len(prompts) >= 300
    assert Counter(p.hard for p in prompts)[True] >= 100 and Counter(p.hard for p in prompts)[False] >= 100
    held = [p for p in prompts if is_held_out(p.family)]
    assert {p.hard for p in held} == {True, False}
    assert {p.family for p in held}.isdisjoint({p.family for p in prompts if not is_held_out(p.family)})
    assert all(p.output_tokens > 0 for p in prompts)
    assert len({p.prompt for p in prompts}) == len(prompts)  # no prompt twice


def test_the_committed_weights_agree_with_the_held_out_labels_above_the_floor() -> None:
    held = [p for p in labelled_prompts() if is_held_out(p.family)]
    measured = agreement(default_model(), held)
    assert measured >= AGREEMENT_FLOOR, f"held-out agreement {measured:.3f} < {AGREEMENT_FLOOR}"


def test_a_retrain_reproduces_the_committed_weights_and_their_agreement() -> None:
    result = train()
    assert same_weights(json.loads(WEIGHTS_PATH.read_text()), result.model.to_json())
    held = [p for p in labelled_prompts() if is_held_out(p.family)]
    assert result.held_out_agreement == agreement(default_model(), held)
    assert result.train_size + result.held_out_size == len(list(labelled_prompts()))


def test_the_training_command_checks_the_committed_weights() -> None:
    out = io.StringIO()
    call_command("train_difficulty", "--check", stdout=out)
    assert "committed weights match" in out.getvalue() and "held out 54" in out.getvalue()


def test_scores_are_probabilities_that_separate_obvious_prompts() -> None:
    model = default_model()
    easy = model.score("Hello, how are you today?")
    hard = model.score(
        "Write a Python function that schedules jobs with dependencies using a topological sort, "
        "handle cycles with a clear error, add type hints and unit tests, and explain its complexity."
    )
    assert 0.0 <= easy < 0.5 <= hard <= 1.0
    assert 0.0 <= model.score("") <= 1.0
    assert 0.0 <= model.score("x" * 100_000) <= 1.0  # a huge prompt scores (only its head is hashed)
