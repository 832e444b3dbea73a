"""Function tools of ``POST /v1/chat/completions``, as vLLM 0.32's OpenAI server handles them, without vLLM.

One module per job, in the order a request meets them:

- :mod:`openai_api.tools.parsing`: the request's ``tools``, ``tool_choice`` and ``parallel_tool_calls`` checked
  into a :class:`~openai_api.tools.parsing.ToolRequest` (its :class:`~openai_api.tools.parsing.ToolMode` and the
  structured-outputs constraint a forced tool puts on the answer), and the run's structured outputs.
- :mod:`openai_api.tools.grammar`: the grammar of "auto" (text, or the "required" array of calls).
- :mod:`openai_api.tools.hermes`: "auto" in the hermes format (``<tool_call>`` blocks) on a deployment that
  declares that parser: its grammar, the calls of an answer finished or growing, past calls written in it.
- :mod:`openai_api.tools.prompt`: the tools as system-prompt text, for a model whose chat template shows none.
- :mod:`openai_api.tools.calls`: :func:`~openai_api.tools.calls.parse_tool_output`, a finished answer as text or
  tool calls (their ids, a call cut short included), and the finish reason.
- :mod:`openai_api.tools.scan`: where the calls sit in a (possibly partial) array, for the two modules around it.
- :mod:`openai_api.tools.streaming`: :class:`~openai_api.tools.streaming.ToolCallStream`, the calls of an answer
  still being generated, as OpenAI ``delta.tool_calls`` (or ``delta.content`` for an "auto" text answer).

The boundary another endpoint (``/v1/responses`` function tools) uses: :func:`~openai_api.tools.parsing.parse_tools`
(a chat-completions-shaped ``{tools, tool_choice, parallel_tool_calls}``) gives the
:class:`~openai_api.tools.parsing.ToolRequest` whose ``structured`` is the constraint
(:func:`~openai_api.tools.parsing.request_structured_outputs` with a ``response_format``);
:func:`~openai_api.tools.prompt.history_with_tools` the leading system message;
:func:`~openai_api.tools.calls.parse_tool_output` and :class:`~openai_api.tools.streaming.ToolCallStream` read the
answer.
- :mod:`openai_api.tools.history`: assistant ``tool_calls`` messages and ``tool`` messages of the conversation,
  checked and stored as plain (role, content) turns.

vLLM (``ChatCompletionRequest.check_tool_usage``, ``ToolParser.adjust_request``, ``tool_parsers/utils.py``
``get_json_schema_from_tools``, ``tool_parsers/streaming.py``, ``parser/abstract_parser.py``) constrains the answer
with structured outputs when the caller forces a tool:

- a named ``tool_choice`` ``{"type": "function", "function": {"name": N}}``: the answer is the arguments object,
  constrained to N's ``parameters`` schema (``{"type": "object", "properties": {}}`` when it has none). It comes
  back as one tool call whose ``arguments`` is the answer text as generated; finish reason unchanged (``stop``).
- ``tool_choice: "required"``: the answer is a JSON array (at least one item, at most one with
  ``parallel_tool_calls: false``) of ``{"name": <one of the tools>, "parameters": <its schema>}``; each item is a
  tool call whose ``arguments`` is ``json.dumps(parameters)``; finish reason ``tool_calls``. Tools' ``$defs`` are
  hoisted to the top of that schema (so ``#/$defs/...`` references still resolve).
- ``tool_choice: "none"`` (and no ``tool_choice`` without tools): the tools are rendered, nothing is constrained.
- ``tool_choice: "auto"`` (the default when ``tools`` are given) needs a tool-call parser in vLLM (a 400 without
  ``--tool-call-parser``). Here it needs none: a grammar (:mod:`openai_api.tools.grammar`) lets the answer be text or
  the "required" array, told apart by its first character. ``ENGINE_TOOL_CALL_PARSER=hermes`` makes the call branch
  vLLM's hermes form instead (:mod:`openai_api.tools.hermes`), read here as vLLM's parser reads it; any other
  declared parser is a 400 for "auto" (:data:`openai_api.tools.parsing.SUPPORTED_TOOL_CALL_PARSERS`).
- An answer cut short inside a call (``max_tokens``) is a call with the arguments written so far, finish ``length``.

Differences from vLLM, on purpose: vLLM 0.32 also refuses named/"required" without a tool-call parser (its
constraint is built by the parser's ``adjust_request``); here they need none, since the constraint does not depend
on the model's tool-call format. Every tool's ``parameters`` schema must compile (vLLM compiles only the one
in use), unknown keys in a tool are a 400 (vLLM ignores them) and tool names follow OpenAI's rule.
"""
