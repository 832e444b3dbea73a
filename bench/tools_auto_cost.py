"""What ``tool_choice: "auto"`` adds to a request, without the engine: the prompt tokens of the tool listing, the
grammar's compile time, and the grammar mask per decode step, beside "required" and a plain JSON schema.

    .venv/bin/python bench/tools_auto_cost.py --tools 1,5 --repeats 5

For each tool count (copies of one weather tool under different names) it prints:

- ``prompt tokens``: the chat template's rendering (SmolLM2's tokenizer) of a one-question chat with the default
  system prompt, then with the tool listing added (``openai_api.tools.prompt``), and the difference;
- ``compile ms``: ``LLMatcher`` built from the grammar with the model's tokenizer (what the engine does once per
  request, median of ``--repeats``);
- ``mask us/step``: ``compute_bitmask`` then the answer's next token, over a text answer and over a call, median per
  step of ``--repeats`` walks (the work llguidance does every decode step, outside the forward pass).

It prints figures; it asserts nothing. CPU only (llguidance and the tokenizer): no lock needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.test")

import django  # noqa: E402

django.setup()

import llguidance  # noqa: E402
import llguidance.hf  # noqa: E402
from django.conf import settings  # noqa: E402

from deployments.tokenizer import get_tokenizer  # noqa: E402
from openai_api.tools.parsing import parse_tools  # noqa: E402
from openai_api.tools.prompt import tool_prompt  # noqa: E402

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
}
TEXT = "The weather in Paris is sunny today, with a light breeze and about twenty degrees in the afternoon."
CALL = '[{"name": "tool_0", "parameters": {"city": "Paris", "unit": "celsius"}}]'


def tools(count: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "The current weather in a city.",
                "parameters": PARAMETERS,
            },
        }
        for i in range(count)
    ]


def prompt_tokens(tokenizer: Any, system: str) -> int:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "What is the weather in Paris?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return len(tokenizer.encode(text, add_special_tokens=False))


def grammar_of(structured: dict[str, Any]) -> str:
    if "grammar" in structured:
        return llguidance.grammar_from("grammar", structured["grammar"])
    return llguidance.LLMatcher.grammar_from_json_schema(
        json.dumps(structured["json"]), defaults={"whitespace_flexible": True}
    )


def walk_us(lltok: Any, grammar: str, ids: list[int]) -> float:
    """Median microseconds of one step (mask, then the token) over ``ids``."""
    matcher = llguidance.LLMatcher(lltok, grammar)
    steps = []
    for token in ids:
        start = time.perf_counter()
        matcher.compute_bitmask()
        ok = matcher.consume_token(token)
        steps.append(time.perf_counter() - start)
        if not ok:
            raise SystemExit(f"the grammar refused the sample answer: {matcher.get_error()}")
    return statistics.median(steps) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", default="1,5")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tokenizer = get_tokenizer()
    lltok = llguidance.hf.from_tokenizer(tokenizer)
    base = settings.CONTEXT.system_prompt
    print(
        f"{'tools':>5} {'choice':>8} {'prompt tokens':>22} {'compile ms':>10} {'mask us/step text':>18} "
        f"{'mask us/step call':>18}"
    )
    for count in (int(c) for c in args.tools.split(",")):
        declared = tools(count)
        for choice, answer in (("auto", None), ("required", CALL), ("schema", None)):
            if choice == "schema":
                structured: dict[str, Any] = {"json": PARAMETERS}
                request = parse_tools({"tools": declared, "tool_choice": "none"})
                samples = {"call": '{"city": "Paris", "unit": "celsius"}'}
            else:
                request = parse_tools({"tools": declared, "tool_choice": choice})
                assert request.structured is not None
                structured = request.structured
                samples = {"text": TEXT, "call": CALL} if choice == "auto" else {"call": answer or CALL}
            listing = tool_prompt(request)
            plain = prompt_tokens(tokenizer, base)
            with_tools = prompt_tokens(tokenizer, f"{base}\n\n{listing}") if listing else plain
            grammar = grammar_of(structured)
            compiles = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                llguidance.LLMatcher(lltok, grammar)
                compiles.append(time.perf_counter() - start)
            masks = {
                kind: statistics.median(
                    walk_us(lltok, grammar, tokenizer.encode(text, add_special_tokens=False))
                    for _ in range(args.repeats)
                )
                for kind, text in samples.items()
            }
            tokens = f"{plain} -> {with_tools} (+{with_tools - plain})"
            text_us = f"{masks['text']:.0f}" if "text" in masks else "-"
            print(
                f"{count:>5} {choice:>8} {tokens:>22} {statistics.median(compiles) * 1e3:>10.2f} {text_us:>18} "
                f"{masks['call']:>18.0f}"
            )


if __name__ == "__main__":
    main()
