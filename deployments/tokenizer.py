"""The serving model's tokenizer, loaded once per process (counts tokens, renders the chat template)."""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)


@lru_cache(maxsize=4)
def _load(model_path: str) -> Any:
    # transformers is imported on first use: it takes seconds and pulls in torch, and most processes that
    # import this module (the dispatcher, the management commands) never load a tokenizer.
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


def warm_up_in_background() -> None:
    """Loads the tokenizer on a daemon thread so a web process's first prompt does not pay ~10 s for it.

    A missing model folder is not fatal here: the first prompt then reports it (or loads it) as usual.
    """

    def load() -> None:
        try:
            get_tokenizer()
        except Exception:  # noqa: BLE001 - warm-up is best effort; the request path raises the real error
            logger.warning("tokenizer warm-up failed for %s", settings.ENGINE.model_path)

    threading.Thread(target=load, name="tokenizer-warmup", daemon=True).start()
