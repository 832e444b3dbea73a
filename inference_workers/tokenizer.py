"""The serving model's tokenizer, loaded once per process (counts tokens, renders the chat template)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.conf import settings


@lru_cache(maxsize=4)
def _load(model_path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


def get_tokenizer() -> Any:
    """The ``AutoTokenizer`` of ``settings.ENGINE.model_path`` (run ``prepare_model`` first for the default)."""
    return _load(settings.ENGINE.model_path)


def count_tokens(text: str) -> int:
    return len(get_tokenizer().encode(text, add_special_tokens=False))


def apply_chat_template(messages: list[dict[str, str]]) -> str:
    """Renders ``[{role, content}, ...]`` into the prompt text, ending with the assistant's turn opener."""
    rendered: str = get_tokenizer().apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return rendered
