"""``/v1/chat/completions`` and ``/v1/completions`` bodies: parsed and checked as vLLM's server checks them, with
a message naming the parameter to fix.

Accepted: what OpenAI documents for these endpoints and vLLM's server honours, plus vLLM's sampling extensions
(``openai_api.params``), OpenAI's own non-sampling parameters (``openai_api.options``), vLLM's
``add_generation_prompt`` and ``continue_final_message``, vLLM's ``structured_outputs``
(``generation.structured_outputs``) and this server's ``constraint`` (a registered batch-level logits processor,
``generation.constraint_spec``). Any other parameter is a 400 that names it: nothing is accepted and then ignored.

The body itself is read within the bounds of ``core.http.json_body`` (size 413, nesting depth 400), and every text
that would be stored is checked for what Postgres cannot hold (a NUL, a lone surrogate: ``core.http.text``), with
the parameter named (``messages[1].content``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from core.http.json_body import JsonBodyError, parse_json, too_large
from core.http.text import text_problem
from deployments.tokenizer import vocab_size
from generation.constraint_spec import check_constraint
from generation.sampling import SamplingError
from generation.structured_outputs import structured_from_request
from openai_api.errors import OpenAIRequestError
from openai_api.options import OPTION_PARAMS, RequestOptions, parse_options
from openai_api.params import (
    SAMPLING_PARAMS,
    SamplingParams,
    chat_logprobs,
    completion_logprobs,
    parse_sampling,
    refuse_unknown,
)
from openai_api.tools.history import tool_turn
from openai_api.tools.parsing import ToolRequest, parse_tools, request_structured_outputs

SYSTEM_ROLES = ("system", "developer")
TURN_ROLES = ("user", "assistant")

MAX_PROMPTS = 8
"""``/v1/completions``: the most prompts in one call (each is a run per choice)."""

CHAT_PARAMS = SAMPLING_PARAMS | {
    "model",
    "messages",
    "max_completion_tokens",
    "logprobs",
    "top_logprobs",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "add_generation_prompt",
    "continue_final_message",
    *OPTION_PARAMS,
}
COMPLETION_PARAMS = SAMPLING_PARAMS | {"model", "prompt", "logprobs", "response_format"}


@dataclass(frozen=True)
class ChatCompletionRequest:
    model: str
    history: list[tuple[str, str]]
    """``(role, content)`` of the messages before the last, in order and as stored: system and developer messages
    where the client put them."""
    prompt: str
    """The last message: the user's (or a tool result's, rendered; or an assistant's to go on from)."""
    sampling: SamplingParams
    tools: ToolRequest = field(default_factory=ToolRequest)
    last_role: str = "user"
    """The last message's role: ``user``, ``tool`` when it hands back a tool's result, ``assistant`` (a new turn
    after it, or with :attr:`continue_final` the same turn continued), ``system``/``developer``."""
    continue_final: bool = False
    """vLLM's ``continue_final_message``: the last message is left open and the answer goes on from its text."""
    options: RequestOptions = field(default_factory=RequestOptions)

    @property
    def stream(self) -> bool:
        return self.sampling.stream.stream

    @property
    def end_user(self) -> str:
        """``safety_identifier`` (OpenAI's successor of ``user``), else ``user``."""
        return self.options.safety_identifier or self.sampling.end_user

    @property
    def message_count(self) -> int:
        return len(self.history) + 1


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompts: list[str]
    sampling: SamplingParams

    @property
    def stream(self) -> bool:
        return self.sampling.stream.stream


def read_body(request: HttpRequest) -> Any:
    """The request's JSON value (None for an empty body); :class:`OpenAIRequestError` when the body is too
    large (413), nested too deeply or not JSON (400)."""
    try:
        try:
            raw = request.body  # Django refuses more than DATA_UPLOAD_MAX_MEMORY_SIZE here
        except RequestDataTooBig:
            raise too_large() from None
        return parse_json(raw or b"null", invalid_code="invalid_json")
    except JsonBodyError as exc:
        raise OpenAIRequestError(exc.message, code=exc.code, status=exc.status_code) from None


def checked_text(text: str, param: str) -> str:
    """A message's text: stored as a message (NUL included, ``core.nul_text``), at most the content limit."""
    problem = text_problem(text, nul_ok=True)
    if problem is not None:
        raise OpenAIRequestError(f"'{param}' {problem}", param=param, code="invalid_text")
    limit = settings.CHAT_LIMITS.max_content_chars
    if len(text) > limit:
        raise OpenAIRequestError(f"'{param}' is {len(text)} characters long; the limit is {limit}.", param=param)
    return text


def message_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return checked_text(content, param)
    if isinstance(content, list):
        parts: list[str] = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise OpenAIRequestError(
                    f'\'{param}[{index}]\' must be a text part {{"type": "text", "text": "..."}}: this model reads '
                    "text only.",
                    param=f"{param}[{index}]",
                )
            problem = text_problem(part["text"], nul_ok=True)
            if problem is not None:
                text_param = f"{param}[{index}].text"
                raise OpenAIRequestError(f"'{text_param}' {problem}", param=text_param, code="invalid_text")
            parts.append(part["text"])
        return checked_text("".join(parts), param)
    raise OpenAIRequestError(f"'{param}' must be a string or a list of text parts.", param=param)


def model_param(body: Any) -> str:
    """The request's ``model`` (the deployment is resolved from it before the rest is read: the tokenizer that
    checks token ids is the deployment's); a missing one is a 400."""
    if not isinstance(body, dict):
        raise OpenAIRequestError("The body must be a JSON object.")
    return _model(body)


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIRequestError("'model' is required: the served model's name (see GET /v1/models).", param="model")
    if model != model.strip():
        # As vLLM's server and OpenAI, a name is matched exactly: ' name ' is not 'name' (they answer 404).
        raise OpenAIRequestError(
            f"'model' is {model[:200]!r}: remove the surrounding whitespace (see GET /v1/models for the names).",
            param="model",
            code="invalid_model",
        )
    return model


def _check_vocab(params: SamplingParams) -> None:
    """Token ids the model does not have are refused (vLLM: out-of-vocabulary ids in ``logit_bias``)."""
    size = vocab_size()
    for name, ids in (("logit_bias", params.spec.logit_bias), ("stop_token_ids", params.spec.stop_token_ids)):
        bad = sorted(t for t in ids if t >= size)
        if bad:
            raise OpenAIRequestError(
                f"'{name}' holds token ids outside the model's vocabulary (0..{size - 1}): {bad[:5]}.", param=name
            )


def _structured(body: dict[str, Any], tools: ToolRequest | None = None) -> dict[str, Any] | None:
    """The answer's constraint: a forced tool's, else ``response_format`` / ``structured_outputs``; compiled
    (once, by the function that reads it) with the backend the engine uses, so what it cannot compile is a 400 now
    with its reason."""
    try:
        if tools is not None:
            structured = request_structured_outputs(body, tools)
        else:
            structured = structured_from_request(body.get("response_format"), body.get("structured_outputs"))
    except SamplingError as exc:
        raise OpenAIRequestError(exc.message, param=exc.param, code="invalid_structured_output") from None
    return structured


def _constraint(body: dict[str, Any]) -> dict[str, Any] | None:
    value = body.get("constraint")
    if value is None:
        return None
    try:
        return check_constraint(value)
    except SamplingError as exc:
        raise OpenAIRequestError(exc.message, param=exc.param) from None


def _sampling(
    body: dict[str, Any], *, logprobs: int | None, logprobs_param: str, structured: dict[str, Any] | None
) -> SamplingParams:
    constraint = _constraint(body)
    if constraint is not None and structured is not None:
        raise OpenAIRequestError(
            "'constraint' cannot be combined with structured outputs (response_format, structured_outputs, "
            "tool_choice): each restricts the answer on its own.",
            param="constraint",
        )
    params = parse_sampling(
        body, logprobs=logprobs, logprobs_param=logprobs_param, structured_outputs=structured, constraint=constraint
    )
    _check_vocab(params)
    return params


def tool_call_parser() -> str:
    """The declared tool-call parser (``ENGINE_TOOL_CALL_PARSER``): the form of an "auto" call and of past calls in
    the history.

    Process-wide, not per deployment: a deployment's ``engine_args`` are vLLM ``AsyncEngineArgs`` fields, passed to
    the engine as they are (``deployments.registration.validate_engine_args``), and vLLM's ``tool_call_parser`` is
    an option of its API server, not of the engine, so it has no place there; carrying one per deployment would
    take a column of its own. Every generation deployment behind this server therefore gets the same form. That
    is safe for any model, since the grammar forces the form (``openai_api.tools.hermes``); only a model whose
    template teaches another form writes calls in one it was not trained on."""
    return settings.ENGINE.tool_call_parser


def _tools(body: dict[str, Any]) -> ToolRequest:
    try:
        return parse_tools(body, tool_call_parser=tool_call_parser())
    except SamplingError as exc:
        raise OpenAIRequestError(exc.message, param=exc.param) from None


def _turn(messages: list[Any], index: int) -> tuple[str, str]:
    """``(role, content)`` as stored of a user/assistant/tool message."""
    param = f"messages[{index}]"
    try:
        tool = tool_turn(messages, index, call_format=tool_call_parser())
    except SamplingError as exc:
        raise OpenAIRequestError(exc.message, param=exc.param) from None
    if tool is not None:
        return tool[0], checked_text(tool[1], f"{param}.content")
    message = messages[index]
    role = message.get("role")
    if role not in TURN_ROLES:
        raise OpenAIRequestError(
            f"'{param}.role' must be one of system, developer, user, assistant, tool; got {role!r}.",
            param=f"{param}.role",
        )
    return str(role), message_text(message.get("content"), f"{param}.content")


def bool_param(body: dict[str, Any], name: str, default: bool) -> bool:
    """A boolean parameter (``default`` when absent or null); anything but true or false is a 400."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise OpenAIRequestError(f"'{name}' must be true or false.", param=name)
    return value


def _continue_final(body: dict[str, Any]) -> bool:
    """vLLM's ``add_generation_prompt`` (default true: the answer is a new assistant turn) and
    ``continue_final_message`` (default false; true: the answer goes on from the last message's text)."""
    generation_prompt = bool_param(body, "add_generation_prompt", True)
    continue_final = bool_param(body, "continue_final_message", False)
    if continue_final and generation_prompt:
        # vLLM's words; body.get: only an explicit true is the clash (left out, the default gives way)
        if body.get("add_generation_prompt") is True:
            raise OpenAIRequestError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                param="continue_final_message",
            )
    if not continue_final and not generation_prompt:
        raise OpenAIRequestError(
            "'add_generation_prompt': false is served only with 'continue_final_message': true (the answer goes on "
            "from the last message); leave both out for a new assistant turn.",
            param="add_generation_prompt",
            code="unsupported_parameter",
        )
    return continue_final


def parse_chat_completion(body: Any) -> ChatCompletionRequest:
    """The call as the chat template will see it: every message in its place and its role, system and developer
    messages anywhere (as vLLM's server sends them to the template), the last one of any role."""
    if not isinstance(body, dict):
        raise OpenAIRequestError("The body must be a JSON object.")
    refuse_unknown(body, CHAT_PARAMS)
    model = _model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIRequestError("'messages' must be a non-empty list of {role, content}.", param="messages")
    options = parse_options(body)
    continue_final = _continue_final(body)
    tools = _tools(body)
    turns: list[tuple[str, str]] = []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise OpenAIRequestError(f"'{param}' must be an object with 'role' and 'content'.", param=param)
        role = message.get("role")
        if role in SYSTEM_ROLES:
            turns.append((str(role), message_text(message.get("content"), f"{param}.content")))
            continue
        turns.append(_turn(messages, index))
    last = f"messages[{len(messages) - 1}]"
    if not turns[-1][1].strip():
        raise OpenAIRequestError("The last message must not be empty.", param=f"{last}.content")
    structured = _structured(body, tools)
    sampling = _sampling(body, logprobs=chat_logprobs(body), logprobs_param="top_logprobs", structured=structured)
    return ChatCompletionRequest(
        model=model,
        history=turns[:-1],
        prompt=turns[-1][1],
        sampling=sampling,
        tools=tools,
        last_role=turns[-1][0],
        continue_final=continue_final,
        options=options,
    )


def parse_completion(body: Any) -> CompletionRequest:
    if not isinstance(body, dict):
        raise OpenAIRequestError("The body must be a JSON object.")
    refuse_unknown(body, COMPLETION_PARAMS)
    model = _model(body)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = list(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        raise OpenAIRequestError("'prompt' as token ids is not supported; send the text.", param="prompt")
    else:
        raise OpenAIRequestError("'prompt' must be a string or a non-empty list of strings.", param="prompt")
    if len(prompts) > MAX_PROMPTS:
        raise OpenAIRequestError(f"'prompt' takes at most {MAX_PROMPTS} strings; got {len(prompts)}.", param="prompt")
    for index, text in enumerate(prompts):
        param = "prompt" if isinstance(prompt, str) else f"prompt[{index}]"
        checked_text(text, param)
        if not text.strip():
            raise OpenAIRequestError(f"'{param}' must not be empty.", param=param)
    if body.get("response_format") is not None:
        raise OpenAIRequestError(
            "'response_format' is a chat parameter; use 'structured_outputs' here.", param="response_format"
        )
    structured = _structured(body)
    sampling = _sampling(body, logprobs=completion_logprobs(body), logprobs_param="logprobs", structured=structured)
    choices = len(prompts) * sampling.n
    if choices > MAX_PROMPTS:
        raise OpenAIRequestError(
            f"{len(prompts)} prompts times n={sampling.n} is {choices} choices; at most {MAX_PROMPTS}.", param="n"
        )
    return CompletionRequest(model=model, prompts=prompts, sampling=sampling)
