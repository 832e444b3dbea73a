"""A worker's stream appends alone: ``--threads`` task threads in one process, each appending a delta to its own
run's stream every ``--interval-s``, with a pipeline per append (direct) and through the process's batching writer
(``runs.streaming.batch``, ``STREAM_BATCHED_WRITES``), interleaved direct, batched, direct, batched. Prints this
process's CPU per append, and for the batched rounds the pipelines sent.

    REDIS_URL="$(redis_url 13)" DATABASE_URL=... .venv/bin/python bench/stream_append_bench.py --threads 96

(``redis_url`` comes from ``source scripts/redis-env.sh``; the Redis database is flushed, never db 0.) Appends that
fail are counted and left out of the figure (redis-py's pool holds 100 connections: more threads than that
appending at once fail with ``Too many connections`` on the direct path).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def one_round(*, batched: bool, threads: int, appends: int, interval_s: float) -> None:
    from core.redis_client import get_redis
    from runs.streaming.batch import PipelineBatcher
    from runs.streaming.contract import RunStreamWriter, StreamEvent

    client = get_redis()
    assert int(client.connection_pool.connection_kwargs.get("db", 0)) != 0, "REDIS_URL names db 0"
    client.flushdb()
    batcher = PipelineBatcher() if batched else None
    writers = [RunStreamWriter(1000 + i, client=client, batcher=batcher) for i in range(threads)]
    start = threading.Barrier(threads + 1)
    failed: Counter[str] = Counter()

    def work(writer: RunStreamWriter) -> None:
        start.wait()
        time.sleep(random.random() * interval_s)
        for _ in range(appends):
            try:
                writer.append(StreamEvent.DELTA, {"text": "hello world " * 4, "tokens": 8})
            except Exception as exc:  # noqa: BLE001 - counted: the figure is per append that went through
                failed[f"{type(exc).__name__}: {exc}"] += 1
            time.sleep(interval_s)

    workers = [threading.Thread(target=work, args=(writer,)) for writer in writers]
    for worker in workers:
        worker.start()
    start.wait()
    cpu0, wall0 = time.process_time(), time.monotonic()
    for worker in workers:
        worker.join()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    done = threads * appends - failed.total()
    line = (
        f"{'batched' if batched else 'direct '}: {done} appends ({failed.total()} failed) in {wall:.1f} s, "
        f"CPU {cpu:.2f} s = {cpu / max(done, 1) * 1000:.3f} ms per append"
    )
    if batcher is not None:
        line += f", {batcher.pipelines} pipelines ({batcher.submissions / max(batcher.pipelines, 1):.1f} appends each)"
    print(line, flush=True)
    for error, count in failed.most_common():
        print(f"  {count} x {error}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=96)
    parser.add_argument("--appends", type=int, default=40, help="appends per thread")
    parser.add_argument("--interval-s", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=2, help="pairs of direct and batched rounds")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.test")
    import django

    django.setup()
    for _ in range(args.rounds):
        for batched in (False, True):
            one_round(batched=batched, threads=args.threads, appends=args.appends, interval_s=args.interval_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
