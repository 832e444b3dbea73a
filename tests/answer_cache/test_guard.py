"""The lexical guard refuses what the embedding cannot tell apart (bench/answer_cache_quality.py's closest hard
negatives) and lets paraphrases through."""

from __future__ import annotations

import pytest

from answer_cache.guard import same_question


@pytest.mark.parametrize(
    ("cached", "prompt"),
    [
        ("Convert 10 miles to kilometers.", "Convert 10 kilometers to miles."),
        ("How do I convert a string to an integer in Java?", "How do I convert an integer to a string in Java?"),
        ("What is 15% of 200?", "What is 25% of 200?"),
        ("What was the population of London in 1900?", "What was the population of London in 2000?"),
        ("What is 7 times 8?", "What is 8 times 8?"),
    ],
)
def test_other_numbers_or_swapped_words_are_another_question(cached: str, prompt: str) -> None:
    assert not same_question(cached, prompt)


@pytest.mark.parametrize(
    ("cached", "prompt"),
    [
        ("What is the capital of France?", "What's the capital city of France?"),
        ("What is the square root of 144?", "What's the square root of 144?"),
        ("How much is 1,000 dollars?", "How much is 1000 dollars?"),
        ("What is the capital of France?", "What is the capital of France?"),
    ],
)
def test_paraphrases_and_repeats_pass(cached: str, prompt: str) -> None:
    assert same_question(cached, prompt)
