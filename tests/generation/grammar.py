"""Runs a compiled llguidance grammar over a string, byte by byte: whether the engine would let that text through."""

from __future__ import annotations

import json
from typing import Any

import llguidance


class _ByteTokenizer:
    """One token per byte, plus an end-of-sequence token: enough to run a grammar over a string."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]

    def __call__(self, text: str) -> list[int]:
        return list(text.encode())


_TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokenizer()))


def accepts(grammar_text: str, text: str) -> bool:
    """Whether the grammar accepts exactly ``text``."""
    matcher = llguidance.LLMatcher(_TOKENIZER, grammar_text)
    assert not matcher.get_error(), matcher.get_error()
    for byte in text.encode():
        if not matcher.consume_token(byte):
            return False
    return matcher.is_accepting()


def schema_accepts(schema: dict[str, Any], text: str) -> bool:
    """Whether a JSON schema, compiled as vLLM's guidance backend compiles it, accepts ``text``."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": True})
    return accepts(grammar, text)
