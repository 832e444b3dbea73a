"""SSE relay benchmark: one web process holding N concurrent streams, each written at R tokens/s.

    DATABASE_URL=postgres://chat:chat@127.0.0.1:5432/chat .venv/bin/python bench/sse_bench.py \
        --streams 1,500,2000 --rate 20 --duration 30

For each level it starts nothing new but the streams: one uvicorn web process (``--port``), a private
``redis-server`` (``--redis-port``, so ``INFO commandstats`` counts only this benchmark) and a writer process
that plays N workers with the real :class:`runs.streaming.contract.RunStreamWriter` and the adaptive flush interval
(:func:`runs.streaming.load.current_flush_interval`), batching the appends due in each 5 ms tick into one
pipeline. Every delta carries ``t``, the wall-clock time it was handed to Redis; this process (asyncio
protocol clients, one TCP connection per stream, ``Authorization: Token``) reads the streams and prints:

- streams held (connected, and every one received its whole text and ``done``),
- added latency per chunk, from the XADD to the client's read, p50 / p99 / max,
- web process CPU seconds per 1,000 relayed tokens,
- Redis commands per generated token (INFO commandstats delta over the writing phase, all commands),
- the client's and the writer's own CPU use, so a saturated client side shows.

It prints figures; it asserts nothing about them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKEN = "tok "  # every simulated token is 4 characters, so text length / 4 counts tokens


def configure_django(redis_url: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    os.environ["REDIS_URL"] = redis_url
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


# -- fixtures in Postgres ---------------------------------------------------------------------------------------


def prepare_rows(n: int) -> tuple[str, list[int]]:
    """A bench user with an API token and ``n`` streaming runs (one chat each). Reused between runs."""
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from accounts.models import Tier, User
    from chats.models import Chat, Message, MessageRole
    from runs.models import Run, RunStatus

    call_command("migrate", verbosity=0, interactive=False)
    user, _ = User.objects.get_or_create(username="sse-bench", defaults={"tier": Tier.objects.get(name="pro")})
    token, _ = Token.objects.get_or_create(user=user)
    runs = list(Run.objects.filter(user=user).order_by("pk").values_list("pk", flat=True))
    missing = n - len(runs)
    if missing > 0:
        chats = Chat.objects.bulk_create([Chat(owner=user, title=f"bench {i}") for i in range(missing)])
        messages = Message.objects.bulk_create(
            [Message(chat=chat, role=MessageRole.USER, content="bench") for chat in chats]
        )
        created = Run.objects.bulk_create(
            [
                Run(chat=chat, user=user, tier=user.tier, user_message=m, status=RunStatus.STREAMING, max_tokens=4096)
                for chat, m in zip(chats, messages, strict=True)
            ]
        )
        runs += [run.pk for run in created]
    Run.objects.filter(user=user).update(status=RunStatus.STREAMING)
    return token.key, runs[:n]


# -- the writer (its own process: N simulated workers) ----------------------------------------------------------


def writer_main(redis_url: str, run_ids: list[int], rate: float, duration: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    configure_django(redis_url)
    from core.redis_client import get_redis
    from runs.streaming.contract import RunStreamWriter, StreamEvent
    from runs.streaming.load import current_flush_interval

    client = get_redis()
    rng = random.Random(1)
    writers = [RunStreamWriter(run_id, client=client) for run_id in run_ids]
    start = time.monotonic()
    starts = [start + rng.random() for _ in run_ids]  # workers start within one second of each other
    emitted = [0] * len(run_ids)
    flushed = [0] * len(run_ids)
    last_flush = [0.0] * len(run_ids)
    xadds = 0
    intervals: list[float] = []
    cpu0 = time.process_time()
    end = start + duration
    while True:
        now = time.monotonic()
        if now >= end:
            break
        interval = current_flush_interval(client=client)
        intervals.append(interval)
        pipe = client.pipeline(transaction=False)
        for i, writer in enumerate(writers):
            if now < starts[i]:
                continue
            generated = int((now - starts[i]) * rate) + 1
            pending = generated - flushed[i]
            first = flushed[i] == 0
            if pending > 0 and (first or now - last_flush[i] >= interval):
                writer.queue(pipe, StreamEvent.DELTA, {"text": TOKEN * pending, "t": time.time()})
                flushed[i] = generated
                last_flush[i] = now
                xadds += 1
            emitted[i] = generated
        if pipe.command_stack:
            pipe.execute()
        time.sleep(max(0.0, 0.005 - (time.monotonic() - now)))
    pipe = client.pipeline(transaction=False)
    for i, writer in enumerate(writers):
        if flushed[i] < emitted[i]:
            writer.queue(pipe, StreamEvent.DELTA, {"text": TOKEN * (emitted[i] - flushed[i]), "t": time.time()})
            xadds += 1
            flushed[i] = emitted[i]
        writer.queue(pipe, StreamEvent.DONE, {"message_id": None, "finish_reason": "stop", "usage": {}})
    pipe.execute()
    out.put(
        {
            "tokens": sum(flushed),
            "per_run": flushed,
            "xadds": xadds + len(writers),
            "cpu_s": time.process_time() - cpu0,
            "interval_max": max(intervals) if intervals else 0.0,
            "interval_last": intervals[-1] if intervals else 0.0,
        }
    )


# -- the clients ------------------------------------------------------------------------------------------------


@dataclass
class ClientStats:
    latencies: list[float] = field(default_factory=list)
    stamps: list[float] = field(default_factory=list)
    events: int = 0
    failed: int = 0
    connected: int = 0


class SseClient(asyncio.Protocol):
    """One stream over one connection; parses HTTP/1.1 chunked framing and SSE events in data_received."""

    def __init__(self, request: bytes, stats: ClientStats, finished: asyncio.Future[int]) -> None:
        self.request = request
        self.stats = stats
        self.finished = finished
        self.raw = b""
        self.body = b""
        self.headers_done = False
        self.chars = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.raw += data
        if not self.headers_done:
            head, sep, rest = self.raw.partition(b"\r\n\r\n")
            if not sep:
                return
            if not head.startswith(b"HTTP/1.1 200"):
                self._finish(error=head.split(b"\r\n", 1)[0].decode())
                return
            self.headers_done = True
            self.stats.connected += 1
            self.raw = rest
        while True:  # chunked transfer encoding
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.raw[:line_end], 16)
            if len(self.raw) < line_end + 2 + size + 2:
                break
            self.body += self.raw[line_end + 2 : line_end + 2 + size]
            self.raw = self.raw[line_end + 2 + size + 2 :]
            if size == 0:
                break
        while True:
            block, sep, rest = self.body.partition(b"\n\n")
            if not sep:
                break
            self.body = rest
            self._event(block)

    def _event(self, block: bytes) -> None:
        event = data = b""
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                event = line[7:]
            elif line.startswith(b"data: "):
                data = line[6:]
        if not event:
            return
        now = time.time()
        self.stats.events += 1
        if event == b"delta":
            payload = json.loads(data)
            self.stats.latencies.append(now - payload["t"])
            self.stats.stamps.append(now)
            self.chars += len(payload["text"])
        elif event in (b"done", b"error"):
            self._finish()

    def _finish(self, error: str | None = None) -> None:
        if not self.finished.done():
            if error:
                self.stats.failed += 1
                self.finished.set_exception(RuntimeError(error))
            else:
                self.finished.set_result(self.chars // len(TOKEN))
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            self.stats.failed += 1
            self.finished.set_exception(RuntimeError(f"connection lost: {exc}"))


def _factory(request: bytes, stats: ClientStats, finished: asyncio.Future[int]) -> Callable[[], SseClient]:
    return lambda: SseClient(request, stats, finished)


async def open_clients(
    host: str, port: int, token: str, run_ids: list[int], stats: ClientStats
) -> list[asyncio.Future[int]]:
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[int]] = []
    batch = 100
    for offset in range(0, len(run_ids), batch):
        opening = []
        for run_id in run_ids[offset : offset + batch]:
            request = (
                f"GET /api/runs/{run_id}/stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Token {token}\r\nAccept: text/event-stream\r\n\r\n"
            ).encode()
            finished: asyncio.Future[int] = loop.create_future()
            futures.append(finished)
            opening.append(loop.create_connection(_factory(request, stats, finished), host, port))
        await asyncio.gather(*opening)
        while stats.connected + stats.failed < len(futures):  # the web process answered all of this batch
            await asyncio.sleep(0.01)
    return futures


# -- measurement helpers ----------------------------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def redis_calls(client: object) -> dict[str, int]:
    """Calls per command (and ``<name>:usec``, the microseconds Redis spent in it), server-wide."""
    stats = client.info("commandstats")  # type: ignore[attr-defined]
    calls = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
    calls.update({name.removeprefix("cmdstat_") + ":usec": int(value["usec"]) for name, value in stats.items()})
    return calls


def redis_cpu_s(client: object) -> float:
    info = client.info("cpu")  # type: ignore[attr-defined]
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_level(
    args: argparse.Namespace, n: int, token: str, run_ids: list[int], web_pid: int, redis_client: object
) -> None:
    from runs.streaming.contract import active_streams_key, stream_key

    redis_client.delete(*(stream_key(r) for r in run_ids), active_streams_key())  # type: ignore[attr-defined]
    stats = ClientStats()
    t_connect = time.monotonic()
    futures = await open_clients("127.0.0.1", args.port, token, run_ids, stats)
    connect_s = time.monotonic() - t_connect
    threads = proc_threads(web_pid)
    await asyncio.sleep(1.0)  # let the idle streams settle (initial status events, first polls)
    calls0, web_cpu0, cpu0 = redis_calls(redis_client), proc_cpu_s(web_pid), time.process_time()
    redis_cpu0 = redis_cpu_s(redis_client)
    out: mp.Queue = mp.get_context("spawn").Queue()  # type: ignore[type-arg]
    writer = mp.get_context("spawn").Process(
        target=writer_main, args=(args.redis_url, run_ids, args.rate, args.duration, out)
    )
    writer.start()
    results = await asyncio.gather(*futures, return_exceptions=True)
    written = await asyncio.get_running_loop().run_in_executor(None, out.get)
    writer.join()
    calls1, web_cpu1, cpu1 = redis_calls(redis_client), proc_cpu_s(web_pid), time.process_time()
    redis_cpu = redis_cpu_s(redis_client) - redis_cpu0
    complete = sum(1 for got, want in zip(results, written["per_run"], strict=True) if got == want)
    deltas = {name: calls1.get(name, 0) - calls0.get(name, 0) for name in calls1}
    usec = {name: deltas.pop(name) for name in list(deltas) if name.endswith(":usec")}
    total_calls = sum(v for name, v in deltas.items() if name not in ("info",))
    xreads = deltas.get("xread", 0)
    top = ", ".join(f"{k} {v}" for k, v in sorted(deltas.items(), key=lambda kv: -kv[1])[:5] if v)
    tokens = written["tokens"]
    lat = stats.latencies
    web_cpu = web_cpu1 - web_cpu0
    print(f"\n== {n} streams x {args.rate:g} tokens/s for {args.duration:g} s (one web process) ==")
    print(f"streams held to the end, whole text: {complete}/{n}   (failed {stats.failed})")
    print(f"connect phase {connect_s:.1f} s; web process threads with all streams open: {threads}")
    print(
        f"flush interval chosen by the writer: {written['interval_last'] * 1000:.0f} ms "
        f"(max {written['interval_max'] * 1000:.0f} ms)"
    )
    print(f"tokens generated {tokens}, XADDs {written['xadds']}, SSE events read {stats.events}")
    print(
        f"added latency per chunk (XADD -> client read): p50 {percentile(lat, 0.5) * 1000:.1f} ms, "
        f"p99 {percentile(lat, 0.99) * 1000:.1f} ms, max {max(lat, default=float('nan')) * 1000:.1f} ms "
        f"over {len(lat)} chunks"
    )
    if args.timeline and stats.stamps:
        t0 = stats.stamps[0]
        buckets: dict[int, list[float]] = {}
        for stamp, value in zip(stats.stamps, lat, strict=True):
            buckets.setdefault(int(stamp - t0), []).append(value)
        print(
            "  per second p50/p99 ms:",
            " ".join(
                f"{k}:{percentile(v, 0.5) * 1000:.0f}/{percentile(v, 0.99) * 1000:.0f}"
                for k, v in sorted(buckets.items())
            ),
        )
    print(f"web process CPU: {web_cpu:.2f} s = {web_cpu / tokens * 1000:.3f} s per 1,000 relayed tokens")
    print(f"Redis commands per generated token: {total_calls / tokens:.4f}  ({total_calls} commands: {top})")
    if xreads:
        print(
            f"relay XREADs: {xreads} ({xreads / args.duration:.0f}/s), "
            f"{usec.get('xread:usec', 0) / xreads:.0f} us of Redis time each"
        )
    print(
        f"client side CPU {cpu1 - cpu0:.1f} s, writer CPU {written['cpu_s']:.1f} s, Redis CPU {redis_cpu:.1f} s, "
        f"writing for {args.duration:g} s (2 cores shared)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="1,500,2000", help="comma-separated stream counts, one level each")
    parser.add_argument("--rate", type=float, default=20.0, help="tokens per second per stream")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of writing per level")
    parser.add_argument("--port", type=int, default=8135, help="web process port")
    parser.add_argument("--timeline", action="store_true", help="also print latency percentiles per second")
    parser.add_argument("--redis-port", type=int, default=8139, help="private redis-server port")
    args = parser.parse_args()
    args.redis_url = f"redis://127.0.0.1:{args.redis_port}/0"
    levels = [int(x) for x in args.streams.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * max(levels) + 1024)), hard))

    redis_proc = subprocess.Popen(
        ["redis-server", "--port", str(args.redis_port), "--save", "", "--appendonly", "no", "--maxclients", "20000"],
        stdout=subprocess.DEVNULL,
    )
    web = None
    try:
        time.sleep(0.3)
        configure_django(args.redis_url)
        import redis

        redis_client = redis.Redis.from_url(args.redis_url, decode_responses=True)
        token, run_ids = prepare_rows(max(levels))
        from django.db import connection

        connection.close()
        env = {**os.environ, "REDIS_URL": args.redis_url}
        web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "chatproject.asgi:application",
                "--port",
                str(args.port),
                "--no-access-log",
                "--timeout-graceful-shutdown",
                "2",
                "--backlog",
                "4096",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
        )
        import httpx

        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{args.port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        for n in levels:
            asyncio.run(run_level(args, n, token, run_ids[:n], web.pid, redis_client))
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=10)
        redis_proc.terminate()
        redis_proc.wait(timeout=10)


if __name__ == "__main__":
    main()
