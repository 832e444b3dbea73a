"""The grammar of ``tool_choice: "auto"``: the answer is either plain text or the "required" array of calls.

No tool-call parser is needed because the answer's form is fixed by the grammar, not by the model's training: a call
is the JSON array ``[{"name": ..., "parameters": {...}}]`` of :func:`openai_api.tools.parsing.required_tools_schema`
(each ``parameters`` constrained to its tool's schema), and anything else is text. The two branches are told apart by
the first character, which llguidance enforces: an answer that starts with ``[`` is a call (the array, and nothing
after it), any other answer is text (which therefore never starts with ``[``; a leading space or newline is text). So
every answer, finished or cut short, is parsed without guessing (:func:`starts_a_call`).

With a ``response_format`` JSON object (``json_object``, or a ``json_schema`` whose top level is an object) the text
branch is that object instead: the answer is a call or the object, told apart the same way (``[`` or ``{``).
"""

from __future__ import annotations

import json
from typing import Any

from openai_api.tools.hermes import HERMES, starts_a_hermes_call

CALL_START = "["
"""The first character of a call; no text answer starts with it."""
TEXT_RULE = r"/[^\[](.|\n)*/"
"""Any text of at least one character whose first is not ``[`` (so an immediate end of answer is not allowed)."""


def auto_tools_grammar(calls_schema: dict[str, Any], answer_schema: dict[str, Any] | None = None) -> str:
    """The Lark grammar (llguidance's dialect, ``%json`` embeds a JSON schema) of an "auto" answer.

    ``calls_schema``: the array of calls; ``answer_schema``: the object the answer must be when it is not a call
    (None: free text).
    """
    lines = ["start: calls | answer", f"calls: %json {json.dumps(calls_schema)}"]
    if answer_schema is None:
        lines += ["answer: TEXT", f"TEXT: {TEXT_RULE}"]
    else:
        lines.append(f"answer: %json {json.dumps(answer_schema)}")
    return "\n".join(lines) + "\n"


def starts_a_call(text: str, call_format: str = "") -> bool:
    """Whether an "auto" answer (finished or still growing) is the call branch of :func:`auto_tools_grammar`, or of
    :func:`openai_api.tools.hermes.hermes_auto_grammar` when ``call_format`` is ``hermes``."""
    if call_format == HERMES:
        return starts_a_hermes_call(text)
    return text.startswith(CALL_START)
