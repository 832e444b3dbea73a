"""A lexical check after the similarity search: two prompts the embedding finds alike that are visibly different
questions.

all-MiniLM-L6-v2 (like most sentence embeddings, which pool over words) barely sees word order or a changed
number: "convert 10 miles to kilometers" and "convert 10 kilometers to miles" are 0.993 apart, "string to integer"
and "integer to string" 0.997 (bench/answer_cache_quality.py). No threshold separates them from real paraphrases,
so a candidate must also pass :func:`same_question`: the same numbers, and not the same words in another order.
"""

from __future__ import annotations

import re
from collections import Counter

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[a-z0-9]+")


def _numbers(text: str) -> Counter[str]:
    return Counter(n.replace(",", "") for n in _NUMBER.findall(text))


def same_question(cached: str, prompt: str) -> bool:
    """False when the prompts name different numbers, or hold the same words in a different order (a swap of roles:
    from/to, key/value); True otherwise (the similarity decides)."""
    if _numbers(cached) != _numbers(prompt):
        return False
    cached_words, prompt_words = _WORD.findall(cached.lower()), _WORD.findall(prompt.lower())
    return not (Counter(cached_words) == Counter(prompt_words) and cached_words != prompt_words)
