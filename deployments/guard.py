"""One engine step of a generation deployment, for a classifier: ``next_token_logprobs(prompts, deployment)``.

What the ``guard`` moderation backend calls: each prompt (the chat template already rendered, with
:func:`render_guard_prompt`) goes to the deployment's workers over Redis (``generation.guard_contract``: one round
trip each way, the prompts batched on the engine with whatever it is generating) and comes back as the most likely
next tokens with their log probabilities. No database access: ``deployment`` is the snapshot selection returned
(``deployments.selection.resolve_model``).

A deployment with no worker answering within the timeout is :class:`GuardUnavailable` (503, ``Retry-After``); a
worker that fails the request (its engine refused the prompt) is :class:`GuardFailed` (502).
"""

from __future__ import annotations

import functools
import time

import redis

from core.errors import DomainError
from core.redis_client import make_redis
from deployments import worker_rpc
from deployments.selection import Served
from deployments.tokenizer import load_tokenizer
from generation.guard_contract import (
    MAX_PROMPTS,
    NextTokenRequest,
    TokenLogprobs,
    guard_queue,
    parse_reply,
)

RETRY_AFTER_S = 5


class GuardUnavailable(DomainError):
    status_code = 503
    code = "guard_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Retry-After": str(RETRY_AFTER_S)})


class GuardFailed(DomainError):
    status_code = 502
    code = "guard_failed"


def render_guard_prompt(deployment: Served, *, user_message: str, answer_prefix: str = "") -> str:
    """``user_message`` as the user's turn in the deployment's own chat template, the assistant's turn opened and
    followed by ``answer_prefix``: what the engine continues with the label (``ModelNotReady`` while the
    deployment's tokenizer cannot load)."""
    tokenizer = load_tokenizer(deployment.local_path, wait=False)
    rendered: str = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_message}], tokenize=False, add_generation_prompt=True
    )
    return rendered + answer_prefix


def next_token_logprobs(
    prompts: list[str], deployment: Served, *, top_logprobs: int, timeout_s: float
) -> list[TokenLogprobs]:
    """Per prompt, the ``top_logprobs`` most likely next tokens and their log probabilities, most likely first;
    blocks up to ``timeout_s``."""
    if not prompts:
        return []
    if len(prompts) > MAX_PROMPTS:
        raise GuardFailed(f"At most {MAX_PROMPTS} prompts fit in one guard request; got {len(prompts)}.")
    request = NextTokenRequest(prompts=prompts, top_logprobs=top_logprobs, deadline=time.time() + timeout_s)
    try:
        raw = worker_rpc.call(
            _client(timeout_s),
            queue=guard_queue(deployment.key),
            request=request.to_json(),
            reply_key=request.reply_key,
            deadline=request.deadline,
        )
    except redis.RedisError as exc:
        raise GuardUnavailable(f"The guard cannot reach Redis ({exc.__class__.__name__}); retry shortly.") from exc
    if raw is None:
        raise GuardUnavailable(f"No worker of {deployment.key} answered the guard within {timeout_s:g} s.")
    answers, error = parse_reply(raw)
    if error is not None or len(answers) != len(prompts):
        raise GuardFailed(f"The worker of {deployment.key} failed the guard request: {error or 'wrong answer count'}.")
    return answers


@functools.lru_cache(maxsize=4)
def _client(timeout_s: float) -> redis.Redis:
    """The shared Redis with a socket timeout longer than the wait for a reply (``get_redis``' is 5 s)."""
    return make_redis(socket_connect_timeout=5, socket_timeout=timeout_s + 5)
