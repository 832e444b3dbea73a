"""The figures of the passes around a run (issue 27, docs/passes.md): what the moderation passes add to a prompt's
way in and to its answer's way out.

    source scripts/redis-env.sh
    DATABASE_URL=postgres://chat:chat@127.0.0.1:5432/chat_pbench REDIS_URL="$(redis_url 6)" \\
        CELERY_BROKER_URL="$(redis_url 7)" .venv/bin/python bench/passes_bench.py

It creates and migrates the database if needed (``bench.lib.stack.ensure_database``) and flushes the Redis database
(never db 0). Two bench tiers, copies of ``pro`` with a moderation policy each, keep the rest of the path the same on
both sides. Three parts, printed side by side in one run:

1. **The input pass's added TTFT.** One uvicorn web process (``chatproject.asgi:application``, no worker: runs stay
   queued and are cancelled after each timed POST, as ``bench/post_latency.py`` does), two users with limits no
   post reaches, one on a tier whose policy has ``input_enabled`` on, one off. ``--posts`` clean prompts each (the
   labelled set's clean texts, numbered, those the local classifier passes at the policy's threshold), posted one
   at a time, the two users alternating, so the machine's noise falls on both sides alike:
   ``POST /api/chats/{id}/messages`` p50 / p99 client-side, the difference, and the pass's own recorded cost
   (``Run.passes``' ``moderate_input`` ``ms``: the suspension query and the classifier). Target: p50 <= 5 ms.
2. **The output pass's added latency per chunk.** A worker runtime in this process (what a Celery worker holds) on
   the simulated engine (``ENGINE_BACKEND=simulated``, one sequence at ``--step-ms`` a token: the default 20 ms is a
   GPU-class 50 tokens/s; its CPU fit is 140 ms), runs generated with ``generate_run`` as the worker's task does,
   ``--answer-tokens`` tokens each, the output policy ``off``, ``retract`` and ``holdback`` at each ``--windows``
   size, one run of each in turn. For every token: the time from the engine's emission of it (when the engine's
   generator hands it on, timed by a subclass of the simulated engine) to the ``delta`` carrying it being in the
   run's Redis stream (``XADD`` answered, timed by a subclass of ``RunStreamWriter`` set in
   ``inference_workers.services``): p50 / p99, the first token alone, and the p50 added over ``off``. ``off``
   is not zero: the coalescer batches deltas every ``STREAM_FLUSH_INTERVAL_S``. And the check's own cost, from the
   runs' ``moderate_output`` records (``checks``, ``ms``, ``max_check_ms``).
3. **Time from a flagged token to the ``retract`` event.** The same runtime, the policy's threshold 0 (every
   window flags: the simulated engine's words are clean, so the tier's own knob makes the hit, as
   tests/inference_workers/test_output_moderation.py does), ``retract`` at each window (and ``holdback`` at one, for
   contrast): from the emission of the flagged window's first token (the answer's first) and of the last token
   written before the check to the ``retract`` entry in the stream, and how many tokens of the flagged text a
   client was shown before it.

Prints figures; asserts nothing. The default run takes about two and a half minutes on the shared 2-core VM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from accounts.models import Tier, User
    from inference_workers.engine.base import GenerationDelta, GenerationRequest
    from inference_workers.runtime import WorkerRuntime

LABELLED = ROOT / "moderation" / "data" / "labelled.jsonl"
TIER_ON = "pbench-input-on"
TIER_OFF = "pbench-input-off"
TIER_OUT = "pbench-output"
INPUT_TARGET_MS = 5.0


# Pure helpers (tests/project/test_passes_bench_helpers.py)


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; ``nan`` for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def token_latencies(emitted: Sequence[float], deltas: Sequence[tuple[float, int]]) -> list[float]:
    """Each token's wait from its emission to the stream: ``emitted[k]`` is when token ``k`` left the engine,
    ``deltas`` the stream's ``delta`` entries in order as (time in the stream, tokens it carries). Token ``k`` is in
    the first delta whose running total of tokens passes ``k``; tokens never written (a retracted answer's rest,
    a flagged ``holdback`` window) have no latency and are left out."""
    waits: list[float] = []
    written = 0
    for at, tokens in deltas:
        for k in range(written, min(written + tokens, len(emitted))):
            waits.append(at - emitted[k])
        written += tokens
    return waits


@dataclasses.dataclass(frozen=True)
class RetractTiming:
    """One flagged run: when its ``retract`` came, measured from two tokens, and what a client saw before it."""

    from_first_s: float
    """From the emission of the flagged window's first token (the answer's first: every window flags)."""
    from_last_shown_s: float | None
    """From the emission of the last token written before the retract (the check that fired ran after it);
    None when none was written (``holdback``)."""
    tokens_shown: int


def retract_timing(emitted: Sequence[float], deltas: Sequence[tuple[float, int]], retract_at: float) -> RetractTiming:
    """The figures of one flagged run (see :func:`token_latencies` for the arguments; ``retract_at``: when the
    ``retract`` entry was in the stream). Only deltas written before the retract count as shown."""
    shown = sum(tokens for at, tokens in deltas if at <= retract_at)
    last = emitted[min(shown, len(emitted)) - 1] if shown else None
    return RetractTiming(
        from_first_s=retract_at - emitted[0],
        from_last_shown_s=None if last is None else retract_at - last,
        tokens_shown=shown,
    )


def ms(values: Iterable[float]) -> list[float]:
    return [v * 1000 for v in values]


def fmt(values: Sequence[float], digits: int = 1) -> str:
    """``p50 / p99`` of values already in ms."""
    return f"{pct(values, 0.5):.{digits}f} / {pct(values, 0.99):.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (what docs/passes.md takes as printed)."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# Set-up


def configure_django() -> None:
    from bench.lib.stack import ensure_database, flush_redis

    ensure_database(os.environ["DATABASE_URL"])  # created if missing, migrated, its default deployment ready
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    flush_redis(os.environ["REDIS_URL"])
    import django

    django.setup()


def bench_tier(name: str, **policy: object) -> Tier:
    """A copy of ``pro`` named ``name`` with its own moderation policy (violations never suspend: the flagged runs
    of part 3 would otherwise add up)."""
    from accounts.models import Tier
    from moderation.models import ModerationPolicy

    pro = Tier.objects.get(name="pro")
    fields = {f.name: getattr(pro, f.name) for f in Tier._meta.concrete_fields if f.name not in ("id", "name")}
    tier, _ = Tier.objects.update_or_create(name=name, defaults=fields)
    ModerationPolicy.objects.update_or_create(
        tier=tier, defaults={"violations_before_suspension": 0, "output_mode": "off", **policy}
    )
    return tier


def bench_user(name: str, tier: Tier) -> User:
    from accounts.models import User, UserLimitOverride

    user, _ = User.objects.update_or_create(username=name, defaults={"tier": tier})
    UserLimitOverride.objects.update_or_create(
        user=user,
        defaults={"bucket_capacity_tokens": 10**9, "bucket_refill_per_s": 10**6, "max_concurrent_runs": 1000},
    )
    return user


def clean_prompts(count: int, threshold: float) -> list[str]:
    """``count`` prompts: the labelled set's clean texts, numbered, those the local classifier passes."""
    from moderation.verdicts import judge

    clean = [
        row["text"]
        for line in LABELLED.read_text().splitlines()
        if line.strip()
        for row in [json.loads(line)]
        if row["label"] == "clean"
    ]
    prompts: list[str] = []
    index = 0
    while len(prompts) < count:
        text = f"{clean[index % len(clean)]} ({index})"
        index += 1
        if not judge(text, backend="local", threshold=threshold).flagged:
            prompts.append(text)
        if index > 20 * count:
            raise SystemExit("the labelled set's clean texts are flagged too often to make the prompts")
    return prompts


# Part 1: the input pass


def input_pass(*, posts: int, warmup: int, port: int) -> None:
    import httpx
    from rest_framework.authtoken.models import Token

    from bench.lib.processes import wait_http
    from chats.models import Chat
    from core.redis_client import get_redis
    from deployments.models import ModelDeployment
    from generation.worker_contract import deployment_ready_key
    from moderation.selectors import moderation_policy
    from runs.models import Run

    on, off = bench_tier(TIER_ON, input_enabled=True), bench_tier(TIER_OFF, input_enabled=False)
    users = {"on": bench_user("pbench-input-on", on), "off": bench_user("pbench-input-off", off)}
    tokens = {side: Token.objects.get_or_create(user=user)[0].key for side, user in users.items()}
    total = posts + warmup
    chats = {
        side: [c.pk for c in Chat.objects.bulk_create([Chat(owner=user, title="") for _ in range(total)])]
        for side, user in users.items()
    }
    # No worker runs here (the POST alone is measured): the default deployment is listed as having a ready one.
    default = ModelDeployment.objects.get(is_default=True)
    get_redis().zadd(deployment_ready_key(default.key), {"passes-bench": time.time() + 3600})
    prompts = clean_prompts(total, moderation_policy(tier=on).threshold)

    from django.db import connection

    connection.close()
    argv = [sys.executable, "-m", "uvicorn", "chatproject.asgi:application", "--port", str(port)]
    web = subprocess.Popen(
        [*argv, "--no-access-log", "--log-level", "warning"],
        cwd=ROOT,
        env=os.environ.copy(),
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    times: dict[str, list[float]] = {"on": [], "off": []}
    run_ids: dict[str, list[int]] = {"on": [], "off": []}
    try:
        wait_http(f"{base}/healthz", web, timeout_s=120, what="uvicorn")
        clients = {
            side: httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=30)
            for side, token in tokens.items()
        }
        try:
            for index in range(total):
                # Alternate which side goes first, so neither always follows the other's cancel.
                for side in ("on", "off") if index % 2 == 0 else ("off", "on"):
                    client = clients[side]
                    started = time.perf_counter()
                    resp = client.post(f"/api/chats/{chats[side][index]}/messages", json={"content": prompts[index]})
                    elapsed = time.perf_counter() - started
                    if resp.status_code != 202:
                        raise SystemExit(f"prompt {index} ({side}): {resp.status_code} {resp.text[:300]}")
                    run_id = resp.json()["run"]["id"]
                    client.post(f"/api/runs/{run_id}/cancel")  # untimed: the queue stays empty
                    if index >= warmup:
                        times[side].append(elapsed)
                        run_ids[side].append(run_id)
        finally:
            for client in clients.values():
                client.close()
    finally:
        web.terminate()
        web.wait(10)

    recorded = [
        float(record["ms"])
        for passes in Run.objects.filter(pk__in=run_ids["on"]).values_list("passes", flat=True)
        for record in passes
        if record["pass"] == "moderate_input"
    ]
    leaked = sum(
        record["pass"] == "moderate_input"
        for passes in Run.objects.filter(pk__in=run_ids["off"]).values_list("passes", flat=True)
        for record in passes
    )
    on_ms, off_ms = ms(times["on"]), ms(times["off"])
    added_p50 = pct(on_ms, 0.5) - pct(off_ms, 0.5)
    # Each prompt's two posts went one after the other: their difference is the least touched by the load's drift.
    paired = statistics.median(a - b for a, b in zip(on_ms, off_ms, strict=True))
    print(f"\n## 1. The input pass's added TTFT ({posts} clean prompts a side after {warmup} untimed, alternating)")
    print(
        table(
            ["", "POST p50 / p99 ms", "moderate_input record p50 / p99 ms", "records"],
            [
                ["input moderation on", fmt(on_ms), fmt(recorded, 2), str(len(recorded))],
                ["input moderation off", fmt(off_ms), "-", str(leaked)],
                ["added (on - off)", f"{added_p50:.1f} / {pct(on_ms, 0.99) - pct(off_ms, 0.99):.1f}", "", ""],
                ["added, median of the paired differences", f"{paired:.1f}", "", ""],
            ],
        )
    )
    verdict = "meets" if pct(recorded, 0.5) <= INPUT_TARGET_MS else "misses"
    print(
        f"target p50 <= {INPUT_TARGET_MS:g} ms: the pass's own p50 {pct(recorded, 0.5):.2f} ms {verdict} it; the "
        f"POST's p50 grew {added_p50:.1f} ms ({paired:.1f} ms paired)"
    )


# Parts 2 and 3: the output pass on the simulated engine


class Timings:
    """What the instrumented engine and stream writer saw, per run (thread-safe: the engine has its own thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.emitted: dict[int, list[float]] = {}
        self.deltas: dict[int, list[tuple[float, int]]] = {}
        self.retracts: dict[int, float] = {}

    def emit(self, request_id: str, at: float, tokens: int) -> None:
        if not request_id.startswith("run-") or tokens <= 0:
            return  # a warm-up request, or the end of an aborted one
        run_id = int(request_id.split("-")[1])
        with self.lock:
            self.emitted.setdefault(run_id, []).extend([at] * tokens)

    def appended(self, run_id: int, at: float, event: str, data: dict[str, Any]) -> None:
        with self.lock:
            if event == "delta":
                self.deltas.setdefault(run_id, []).append((at, int(data.get("tokens", 0))))
            elif event == "retract":
                self.retracts[run_id] = at


TIMINGS = Timings()


def instrumented_runtime(*, step_s: float, answer_tokens: int) -> WorkerRuntime:
    """A worker runtime on a simulated engine whose every token's emission is timed, and whose attempts write
    their streams with a writer that times each append (``inference_workers.services.RunStreamWriter``)."""
    from django.conf import settings

    import inference_workers.services as worker_services
    from inference_workers.engine.simulated import SimulatedEngine
    from inference_workers.runtime import WorkerRuntime
    from runs.streaming.contract import RunStreamWriter, StreamEvent

    class TimedEngine(SimulatedEngine):
        async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
            async for delta in super().generate(request):
                TIMINGS.emit(request.request_id, time.perf_counter(), delta.new_tokens)
                yield delta

    class TimedWriter(RunStreamWriter):
        def append(self, event: StreamEvent, data: dict[str, Any]) -> int:
            seq = super().append(event, data)
            TIMINGS.appended(self.run_id, time.perf_counter(), event.value, data)
            return seq

    worker_services.RunStreamWriter = TimedWriter  # type: ignore[misc]
    config = dataclasses.replace(
        settings.ENGINE,
        backend="simulated",
        max_num_seqs=4,
        sim_step_base_s=step_s,
        sim_step_per_seq_s=0.0,
        sim_prefill_per_token_s=0.0,
        sim_output_tokens=answer_tokens,
        sim_fail_rate=0.0,
    )
    return WorkerRuntime(
        worker_name="passes-bench@sim",
        engine_config=config,
        worker_config=settings.WORKERS,
        engine=TimedEngine(config),
    )


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    label: str
    mode: str
    window: int
    threshold: float


@dataclasses.dataclass
class OutputResult:
    latencies_ms: list[float] = dataclasses.field(default_factory=list)
    first_ms: list[float] = dataclasses.field(default_factory=list)
    chunks: int = 0
    tokens: int = 0
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    retracts: list[RetractTiming] = dataclasses.field(default_factory=list)


def one_run(runtime: WorkerRuntime, *, user: User, tier: Tier, config: OutputConfig, max_tokens: int) -> int:
    """A queued run of the bench user's (a chat and its message, as a posted prompt leaves them) under ``config``'s
    policy, generated as the worker's task does; returns its id."""
    from chats.models import Chat, Message, MessageRole
    from inference_workers.services import generate_run
    from moderation.models import ModerationPolicy
    from moderation.selectors import forget_cached_policies
    from runs.models import Run, RunStatus

    ModerationPolicy.objects.filter(tier=tier).update(
        output_mode=config.mode, holdback_tokens=config.window, threshold=config.threshold
    )
    forget_cached_policies()
    chat = Chat.objects.create(owner=user, title="")
    message = Message.objects.create(chat=chat, role=MessageRole.USER, content="Tell me how a model writes.")
    run = Run.objects.create(
        chat=chat, user=user, tier=tier, user_message=message, status=RunStatus.QUEUED, max_tokens=max_tokens
    )
    generate_run(run_id=run.pk, runtime=runtime)
    return run.pk


def output_passes(
    configs: Sequence[OutputConfig], *, runs: int, step_s: float, answer_tokens: int
) -> dict[OutputConfig, OutputResult]:
    """``runs`` runs of each config, one of each in turn; the figures of each."""
    from runs.models import Run

    tier = bench_tier(TIER_OUT, input_enabled=False)
    user = bench_user("pbench-output", tier)
    runtime = instrumented_runtime(step_s=step_s, answer_tokens=answer_tokens)
    runtime.start()
    results = {config: OutputResult() for config in configs}
    try:
        for config in configs:  # untimed: the classifier loaded, the first query of each kind made
            one_run(runtime, user=user, tier=tier, config=config, max_tokens=answer_tokens)
        for _ in range(runs):
            for config in configs:
                run_id = one_run(runtime, user=user, tier=tier, config=config, max_tokens=answer_tokens)
                result = results[config]
                emitted, deltas = TIMINGS.emitted.get(run_id, []), TIMINGS.deltas.get(run_id, [])
                waits = ms(token_latencies(emitted, deltas))
                result.latencies_ms.extend(waits)
                if waits:
                    result.first_ms.append(waits[0])
                result.chunks += len(deltas)
                result.tokens += sum(tokens for _, tokens in deltas)
                passes = Run.objects.get(pk=run_id).passes
                result.records += [p for p in passes if p["pass"] == "moderate_output"]
                if run_id in TIMINGS.retracts:
                    result.retracts.append(retract_timing(emitted, deltas, TIMINGS.retracts[run_id]))
    finally:
        runtime.stop()
    return results


def check_cost(records: Sequence[dict[str, Any]]) -> tuple[str, str, str]:
    """Checks per run, ms per check (p50 / p99 over runs of each run's mean), the worst single check."""
    if not records:
        return "-", "-", "-"
    checks = [int(r["checks"]) for r in records]
    per_check = [float(r["ms"]) / int(r["checks"]) for r in records if int(r["checks"])]
    worst = max(float(r["max_check_ms"]) for r in records)
    return f"{statistics.mean(checks):.1f}", fmt(per_check, 2), f"{worst:.2f}"


def print_output(results: dict[OutputConfig, OutputResult], *, step_s: float, answer_tokens: int) -> None:
    base = next(r for c, r in results.items() if c.mode == "off")
    base_p50 = pct(base.latencies_ms, 0.5)
    rows = []
    for config, result in results.items():
        added = pct(result.latencies_ms, 0.5) - base_p50
        per_run, per_check, worst = check_cost(result.records)
        rows.append(
            [
                config.label,
                fmt(result.latencies_ms),
                f"{added:+.1f}" if config.mode != "off" else "0",
                fmt(result.first_ms),
                f"{result.tokens / result.chunks:.1f}" if result.chunks else "-",
                per_run,
                per_check,
                worst,
            ]
        )
    print(
        f"\n## 2. The output pass's added latency per chunk (simulated engine, {step_s * 1000:g} ms a token, "
        f"{answer_tokens}-token answers, {len(base.first_ms)} runs a mode)"
    )
    print(
        table(
            [
                "output mode",
                "token: engine -> stream p50 / p99 ms",
                "p50 added ms",
                "first token p50 / p99 ms",
                "tokens / chunk",
                "checks / run",
                "ms / check p50 / p99",
                "max check ms",
            ],
            rows,
        )
    )


def print_retracts(results: dict[OutputConfig, OutputResult]) -> None:
    rows = []
    for config, result in results.items():
        timings = result.retracts
        if not timings:
            rows.append([config.label, "no retract", "", "", ""])
            continue
        first = ms(t.from_first_s for t in timings)
        last = ms(t.from_last_shown_s for t in timings if t.from_last_shown_s is not None)
        shown = [t.tokens_shown for t in timings]
        rows.append(
            [
                config.label,
                fmt(first),
                fmt(last) if last else "-",
                f"{min(shown)}-{max(shown)} (median {statistics.median(shown):g})",
                f"{len(timings)}/{len(result.records)}",
            ]
        )
    print("\n## 3. From a flagged token to the `retract` event (threshold 0: every window flags)")
    print(
        table(
            [
                "output mode",
                "from the window's first token p50 / p99 ms",
                "from the last token shown p50 / p99 ms",
                "tokens shown before it",
                "runs retracted",
            ],
            rows,
        )
    )


def parse_windows(text: str) -> list[int]:
    windows = [int(part) for part in text.split(",") if part.strip()]
    if not windows or min(windows) < 1:
        raise argparse.ArgumentTypeError("windows are positive token counts, e.g. 8,16,32")
    return windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posts", type=int, default=200, help="Timed prompts a side in part 1 (default 200).")
    parser.add_argument("--warmup", type=int, default=20, help="Untimed prompts a side first (default 20).")
    parser.add_argument("--port", type=int, default=8716)
    parser.add_argument("--runs", type=int, default=6, help="Runs of each output mode in parts 2 and 3 (default 6).")
    parser.add_argument("--windows", type=parse_windows, default=[8, 16, 32], help="Hold-back windows (tokens).")
    parser.add_argument("--step-ms", type=float, default=20.0, help="The simulated engine's time per token.")
    parser.add_argument("--answer-tokens", type=int, default=64, help="Tokens per answer in part 2.")
    parser.add_argument("--skip-input", action="store_true", help="Parts 2 and 3 only (no web process).")
    args = parser.parse_args()
    for name in ("DATABASE_URL", "REDIS_URL"):
        if name not in os.environ:
            raise SystemExit(f"set {name} (a database and Redis database of the bench's own); see --help")
    started = time.monotonic()
    configure_django()
    print(f"(set-up: {time.monotonic() - started:.0f} s)")
    if not args.skip_input:
        part = time.monotonic()
        input_pass(posts=args.posts, warmup=args.warmup, port=args.port)
        print(f"(part 1: {time.monotonic() - part:.0f} s)")

    from moderation.models import ModerationPolicy

    shipped = ModerationPolicy._meta.get_field("threshold").get_default()
    step_s = args.step_ms / 1000
    default_window = ModerationPolicy._meta.get_field("holdback_tokens").get_default()
    streaming = [OutputConfig("off", "off", default_window, shipped)]
    streaming.append(OutputConfig(f"retract, window {default_window}", "retract", default_window, shipped))
    streaming += [OutputConfig(f"holdback, window {w}", "holdback", w, shipped) for w in args.windows]
    part = time.monotonic()
    results = output_passes(streaming, runs=args.runs, step_s=step_s, answer_tokens=args.answer_tokens)
    print_output(results, step_s=step_s, answer_tokens=args.answer_tokens)
    print(f"(part 2: {time.monotonic() - part:.0f} s)")
    part = time.monotonic()

    flagged = [OutputConfig(f"retract, window {w}", "retract", w, 0.0) for w in args.windows]
    flagged.append(OutputConfig(f"holdback, window {default_window}", "holdback", default_window, 0.0))
    print_retracts(output_passes(flagged, runs=args.runs, step_s=step_s, answer_tokens=max(args.windows) * 2))
    print(f"(part 3: {time.monotonic() - part:.0f} s)")
    print(f"\n(the whole run, set-up included: {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
