"""The serving model's tokenizer, loaded once per process (counts tokens, renders the chat template).

Readiness: a web process loads it at ASGI startup, before it accepts a connection (``deployments.readiness``).
While the model is not there yet (``prepare_model`` still preparing it, or a folder that is missing or
broken), every call raises :class:`ModelNotReady`, a 503 with ``Retry-After``, instead of letting
``transformers`` fail inside a request; a background watcher loads it as soon as it appears. One lock
serializes the loads, so two threads never import ``transformers`` at once (a half-imported module once made
the first prompt after a restart fail with ``cannot import name 'AutoTokenizer'``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from django.conf import settings

from core.errors import DomainError

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5

_tokenizers: dict[str, Any] = {}
_problems: dict[str, str] = {}
"""Why the last load of a model path failed (the message :class:`ModelNotReady` and ``/readyz`` give)."""
_load_lock = threading.Lock()
_serving_path: ContextVar[str | None] = ContextVar("serving_model_path", default=None)
"""The model folder whose tokenizer this request (or this worker process) uses; None: ``settings.ENGINE``'s."""
_process_path: str | None = None


@contextmanager
def using_model(model_path: str) -> Iterator[None]:
    """Within the block, tokens are counted and prompts rendered with ``model_path``'s tokenizer (a request for
    one deployment; another deployment may have another tokenizer and chat template)."""
    token = _serving_path.set(model_path or None)
    try:
        yield
    finally:
        _serving_path.reset(token)


def serve_model_in_process(model_path: str) -> None:
    """This process (a worker) serves ``model_path``: its tokenizer is every caller's default."""
    global _process_path
    _process_path = model_path or None


def serving_model_path() -> str:
    """The model folder the current request or process serves."""
    return _serving_path.get() or _process_path or settings.ENGINE.model_path


class ModelNotReady(DomainError):
    """The model's tokenizer cannot be loaded yet: a 503 with ``Retry-After``; the request wrote nothing."""

    status_code = 503
    code = "model_not_ready"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Retry-After": str(RETRY_AFTER_S)})


def _missing_files(model_path: str) -> str | None:
    """What a local model folder lacks for its tokenizer; None when it has it (or names a cached hub model)."""
    path = Path(model_path)
    if not path.is_absolute() and not model_path.startswith("."):
        return None  # a model name the operator cached locally: only loading it can tell
    if not path.is_dir():
        return f"the model folder {path} does not exist yet (is `manage.py prepare_model` still running?)"
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return f"the model folder {path} has no tokenizer files yet"
    return None


def load_tokenizer(model_path: str, *, wait: bool = True) -> Any:
    """The tokenizer of ``model_path``, loading it on first use; raises :class:`ModelNotReady` when it cannot.

    ``wait=False`` (the request path) does not queue behind a load in progress: it answers 503 at once.
    """
    tokenizer = _tokenizers.get(model_path)
    if tokenizer is not None:
        return tokenizer
    if not _load_lock.acquire(blocking=wait):
        raise ModelNotReady("The model's tokenizer is loading; retry in a few seconds.")
    try:
        if model_path in _tokenizers:
            return _tokenizers[model_path]
        missing = _missing_files(model_path)
        if missing is not None:
            _problems[model_path] = missing
            raise ModelNotReady(f"The model is not ready: {missing}.")
        try:
            # transformers is imported on first use: it takes seconds and pulls in torch, and most processes
            # that import this module (the dispatcher, the management commands) never load a tokenizer.
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model_path)
        except (OSError, ValueError, ImportError) as exc:
            _problems[model_path] = f"loading its tokenizer failed: {exc.__class__.__name__}: {exc}"
            logger.warning("tokenizer of %s could not be loaded", model_path, exc_info=True)
            raise ModelNotReady(f"The model is not ready: {_problems[model_path]}") from exc
        _tokenizers[model_path] = tokenizer
        _problems.pop(model_path, None)
        logger.info("tokenizer of %s loaded", model_path)
        return tokenizer
    finally:
        _load_lock.release()


def tokenizer_status(model_path: str | None = None) -> str:
    """``ok`` when loaded, else why not (for ``/readyz``); never loads anything."""
    path = model_path or serving_model_path()
    if path in _tokenizers:
        return "ok"
    return _problems.get(path) or "not loaded yet"


def get_tokenizer() -> Any:
    """The ``AutoTokenizer`` of the model served here (:func:`serving_model_path`); waits for a load in progress
    (workers, scripts)."""
    return load_tokenizer(serving_model_path())


def request_tokenizer() -> Any:
    """:func:`get_tokenizer` for a request: a load in progress is a 503 now, not a request held for seconds."""
    return load_tokenizer(serving_model_path(), wait=False)


def count_tokens(text: str) -> int:
    return len(request_tokenizer().encode(text, add_special_tokens=False))


def apply_chat_template(
    messages: list[dict[str, str]], *, tools: list[dict[str, Any]] | None = None, continue_final: bool = False
) -> str:
    """Renders ``[{role, content}, ...]`` into the prompt text, ending with the assistant's turn opener.

    ``tools`` (OpenAI tool definitions) go to the template as Hugging Face's ``tools`` argument; a template that
    knows no tools renders without them. None or empty: the template is called exactly as without tools.
    ``continue_final``: the last message is left open (no end-of-turn, no new turn opener) so that the model goes
    on writing it: vLLM's ``continue_final_message``, passed to the template as vLLM passes it.
    """
    tokenizer = request_tokenizer()
    options: dict[str, Any] = (
        {"add_generation_prompt": False, "continue_final_message": True}
        if continue_final
        else {"add_generation_prompt": True}
    )
    if tools:
        options["tools"] = tools
    rendered: str = tokenizer.apply_chat_template(messages, tokenize=False, **options)
    return rendered


_PROBE_TOOL = {
    "type": "function",
    "function": {"name": "probe_tool_x7", "parameters": {"type": "object", "properties": {}}},
}
_renders_tools: dict[str, bool] = {}


def template_renders_tools() -> bool:
    """Whether the served model's chat template shows ``tools`` to the model: a one-message conversation rendered
    with a probe tool differs from the same without it. Once per model folder (a template that fails on tools counts
    as one that does not render them)."""
    path = serving_model_path()
    known = _renders_tools.get(path)
    if known is not None:
        return known
    tokenizer = request_tokenizer()
    probe = [{"role": "user", "content": "hi"}]
    plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    try:
        with_tools = tokenizer.apply_chat_template(
            probe, tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 - a template's own error (jinja raising on tools): it renders none
        with_tools = plain
    _renders_tools[path] = renders = with_tools != plain
    return renders


def vocab_size() -> int:
    """Token ids run from 0 to this minus one (what vLLM checks ``logit_bias`` and ``stop_token_ids`` against)."""
    return len(request_tokenizer())
