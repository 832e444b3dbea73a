"""The worker side of ``generation.guard_contract``: a thread of the generation worker that answers next-token
requests for its deployment with one engine step each, on the engine its runs use.

It ``BLPOP``s the deployment's queue, drains what else is waiting (up to ``max_prompts`` prompts), submits every
prompt to the engine at once (``max_tokens=1``, temperature 0, ``logprobs=top_logprobs``, at vLLM priority
:data:`GUARD_PRIORITY`: a prompt waits on its check, so checks go before queued runs) and, when all have answered,
pushes each request's tokens to its reply key. The engine batches the checks with each other and with the runs it is
generating; a check adds one prefill to a step, no slot held beyond it.

Why top log probabilities and not vLLM's ``logprob_token_ids`` (exact log probabilities of named label tokens): on
the V1 model runner (every CPU host) a step that holds one request with ``logprob_token_ids`` replaces the top-k log
probabilities of every other request in it with those ids' columns (``vllm/v1/sample/sampler.py``: "prefer
logprob_token_ids"), which would corrupt the ``top_logprobs`` of chat runs batched with a check.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import redis

from generation.guard_contract import (
    REPLY_TTL_S,
    NextTokenRequest,
    TokenLogprobs,
    guard_queue,
    reply_json,
)
from generation.sampling import MAX_TOP_LOGPROBS, SamplingSpec
from inference_workers.engine.base import EngineError, GenerationRequest
from inference_workers.engine.host import EngineHost

logger = logging.getLogger(__name__)

POLL_S = 1.0
GUARD_PRIORITY = 0
"""vLLM priority of a check (lower first): the best a tier's run gets, so a check never waits behind queued runs."""
REQUEST_PREFIX = "guard-"


def next_token_logprobs(host: EngineHost, prompt: str, *, top_logprobs: int) -> TokenLogprobs:
    """The engine's ``top_logprobs`` most likely next tokens after ``prompt`` (one step; raises ``EngineError``)."""
    request = GenerationRequest(
        request_id=f"{REQUEST_PREFIX}{uuid.uuid4().hex[:12]}",
        prompt=prompt,
        max_tokens=1,
        sampling=SamplingSpec(temperature=0.0, logprobs=max(1, min(MAX_TOP_LOGPROBS, top_logprobs))),
        priority=GUARD_PRIORITY,
    )
    for delta in host.stream(request):
        if delta is not None and delta.logprobs:
            top = delta.logprobs[0]["top_logprobs"]
            return [(str(entry["token"]), float(entry["logprob"])) for entry in top]
    raise EngineError("the engine answered no token")


class GuardServer:
    """Serves ``deployment``'s guard queue from ``host`` until :meth:`stop`."""

    def __init__(
        self, *, host: EngineHost, deployment: str, client: redis.Redis, max_prompts: int, name: str = "guard-server"
    ) -> None:
        self.host = host
        self.deployment = deployment
        self.client = client
        self.max_prompts = max(1, max_prompts)
        self.pool = ThreadPoolExecutor(max_workers=self.max_prompts, thread_name_prefix="guard-check")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.served_prompts = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=POLL_S + 5)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.take()
                if batch:
                    self.serve(batch)
            except Exception:  # a Redis hiccup must not end the thread; the callers time out and answer 503
                logger.exception("guard server of %s failed; going on", self.deployment)
                self._stop.wait(1.0)

    def take(self) -> list[NextTokenRequest]:
        """The requests waiting (blocks up to ``POLL_S`` for the first), up to ``max_prompts`` prompts beyond it."""
        queue = guard_queue(self.deployment)
        first = self.client.blpop([queue], timeout=POLL_S)
        if first is None:
            return []
        requests = [NextTokenRequest.from_json(str(first[1]))]
        prompts = len(requests[0].prompts)
        while prompts < self.max_prompts:
            raw = self.client.lpop(queue)
            if raw is None:
                break
            requests.append(NextTokenRequest.from_json(str(raw)))
            prompts += len(requests[-1].prompts)
        return requests

    def serve(self, requests: list[NextTokenRequest]) -> None:
        """Every live request's prompts through the engine at once; each request answered on its reply key (an
        engine error fails the request it belongs to, with its message)."""
        now = time.time()
        live = [r for r in requests if r.deadline > now]
        if len(live) < len(requests):
            logger.warning("dropped %d guard request(s) past their deadline", len(requests) - len(live))
        futures = [
            [self.pool.submit(next_token_logprobs, self.host, p, top_logprobs=r.top_logprobs) for p in r.prompts]
            for r in live
        ]
        pipe = self.client.pipeline(transaction=False)
        for request, pending in zip(live, futures, strict=True):
            try:
                answer = reply_json(answers=[f.result() for f in pending])
            except EngineError as exc:
                answer = reply_json(error=f"{type(exc).__name__}: {exc}")
            pipe.rpush(request.reply_key, answer)
            pipe.expire(request.reply_key, REPLY_TTL_S)
            self.served_prompts += len(request.prompts)
        pipe.execute()


_server: GuardServer | None = None


def start_guard_server(*, host: EngineHost, deployment: str, client: redis.Redis, max_prompts: int) -> GuardServer:
    """Starts this process's guard server (one per worker process, beside its runtime)."""
    global _server
    if _server is None:
        _server = GuardServer(host=host, deployment=deployment, client=client, max_prompts=max_prompts)
        _server.start()
        logger.info("guard server: answering next-token requests for %s", deployment)
    return _server


def stop_guard_server() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None
