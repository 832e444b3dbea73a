"""The partition digest (what must match exactly) and the eligibility rules (what bypasses the cache)."""

from __future__ import annotations

import dataclasses

import pytest

from answer_cache.eligibility import BypassReason, cache_eligible
from answer_cache.keys import CacheKeyParts, partition_digest
from answer_cache.models import CachePolicy
from generation.sampling import SamplingSpec

BASE = CacheKeyParts(
    deployment_id=1,
    deployment_key="m@v1",
    sampling=SamplingSpec(temperature=0.0),
    max_tokens=256,
    system_prompt="You are helpful.",
)


def digest(parts: CacheKeyParts, model: str = "emb@v1") -> str:
    return partition_digest(parts, embedding_model=model)


def test_the_same_parts_give_the_same_digest() -> None:
    again = dataclasses.replace(BASE)
    assert digest(again) == digest(BASE)
    assert len(digest(BASE)) == 64


@pytest.mark.parametrize(
    "change",
    [
        {"deployment_key": "m@v2"},
        {"system_prompt": "You are terse."},
        {"history": (("user", "hi"), ("assistant", "hello"))},
        {"sampling": SamplingSpec(temperature=0.0, top_p=0.9)},
        {"sampling": SamplingSpec(temperature=0.0, stop=("\n",))},
        {"sampling": SamplingSpec(temperature=0.0, structured_outputs={"json": {"type": "object"}})},
        {"sampling": SamplingSpec(temperature=0.0, structured_outputs={"choice": ["yes", "no"]})},
        {"sampling": SamplingSpec(temperature=0.5)},
        {"max_tokens": 64},
        {"endpoint": "completions"},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"context_digest": "a" * 64, "user_context": True},
    ],
)
def test_each_part_that_decides_the_answer_changes_the_partition(change: dict[str, object]) -> None:
    assert digest(dataclasses.replace(BASE, **change)) != digest(BASE)  # type: ignore[arg-type]


def test_the_embedding_model_is_part_of_the_partition() -> None:
    assert digest(BASE, "emb@v1") != digest(BASE, "emb@v2")


def test_history_order_matters() -> None:
    one = dataclasses.replace(BASE, history=(("user", "a"), ("user", "b")))
    other = dataclasses.replace(BASE, history=(("user", "b"), ("user", "a")))
    assert digest(one) != digest(other)


def test_shareable_only_without_history_or_anything_of_the_users() -> None:
    assert BASE.shareable
    assert not dataclasses.replace(BASE, history=(("user", "a"),)).shareable
    assert not dataclasses.replace(BASE, user_system_prompt=True).shareable
    assert not dataclasses.replace(BASE, user_context=True).shareable


POLICY = CachePolicy(enabled=True, allow_sampled=False)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"sampling": SamplingSpec(temperature=0.0, seed=7)}, BypassReason.SEEDED),
        ({"n": 2}, BypassReason.MULTIPLE_CHOICES),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, BypassReason.TOOLS),
        ({"sampling": SamplingSpec(temperature=0.0, logprobs=0)}, BypassReason.LOGPROBS),
        ({"sampling": SamplingSpec(temperature=0.7)}, BypassReason.SAMPLED),
    ],
)
def test_bypass_reasons(change: dict[str, object], reason: BypassReason) -> None:
    parts = dataclasses.replace(BASE, **change)  # type: ignore[arg-type]
    assert cache_eligible(policy=POLICY, parts=parts, prompt="What is 2+2?") == reason


def test_greedy_prompt_is_eligible_and_an_empty_one_is_not() -> None:
    assert cache_eligible(policy=POLICY, parts=BASE, prompt="What is 2+2?") is None
    assert cache_eligible(policy=POLICY, parts=BASE, prompt="  \n") == BypassReason.EMPTY_PROMPT


def test_sampled_prompt_is_eligible_with_the_tiers_opt_in_but_a_seed_never_is() -> None:
    sampled = dataclasses.replace(BASE, sampling=SamplingSpec(temperature=0.7))
    opted_in = CachePolicy(enabled=True, allow_sampled=True)
    assert cache_eligible(policy=opted_in, parts=sampled, prompt="hi") is None
    seeded = dataclasses.replace(BASE, sampling=SamplingSpec(temperature=0.7, seed=1))
    assert cache_eligible(policy=opted_in, parts=seeded, prompt="hi") == BypassReason.SEEDED


def test_disabled_by_policy_or_by_setting(settings: object) -> None:
    assert cache_eligible(policy=CachePolicy(enabled=False), parts=BASE, prompt="hi") == BypassReason.DISABLED
    settings.ANSWER_CACHE = dataclasses.replace(settings.ANSWER_CACHE, enabled=False)  # type: ignore[attr-defined]
    assert cache_eligible(policy=POLICY, parts=BASE, prompt="hi") == BypassReason.DISABLED
