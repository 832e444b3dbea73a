"""``bench/dispatcher_ceiling.py`` end to end on a small queue: the real dispatcher sends every queued run, each
exactly once, through the batched sender to Celery's broker. It asserts no speed: the figures are printed.

About 30 s here (the database is migrated first).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import redis
from django.conf import settings

from bench.lib import processes
from bench.lib.processes import ROOT

BENCH = ROOT / "bench" / "dispatcher_ceiling.py"
RUNS = 40


@pytest.mark.live
def test_every_queued_run_is_published_once() -> None:
    argv = [sys.executable, str(BENCH), "--runs", str(RUNS), "--users", "7"]
    argv += ["--database-url", f"{processes.test_database_url()}_dispatch"]
    argv += ["--redis-url", settings.REDIS_URL, "--broker-url", settings.CELERY_BROKER_URL]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    assert re.search(rf"sent {RUNS} of {RUNS} runs in \d+ ticks: .* ms of CPU per decision", done.stdout), report
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    run_ids: list[int] = []
    for key in broker.scan_iter(count=1000):
        if broker.type(key) == b"list":
            for raw in broker.lrange(key, 0, -1):  # type: ignore[union-attr]
                message = json.loads(raw)
                if message["headers"]["task"].startswith("inference_workers"):
                    run_ids += [int(x) for x in re.findall(r"\d+", message["headers"]["argsrepr"])]
    assert len(run_ids) == RUNS and len(set(run_ids)) == RUNS, (sorted(run_ids), report)


SEND_BENCH = ROOT / "bench" / "send_generates_cpu.py"


@pytest.mark.live
def test_the_send_bench_publishes_its_batches_and_leaves_the_broker_empty() -> None:
    """``bench/send_generates_cpu.py`` on a few small batches: it prints its figure and flushes the broker after."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    argv = [sys.executable, str(SEND_BENCH), "--batch", "4", "--calls", "2", "--blocks", "2", "--queue", "free"]
    argv += ["--redis-url", settings.REDIS_URL, "--broker-url", settings.CELERY_BROKER_URL]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    figure = r"2 blocks of 2 batches of 4: ms of CPU per message min [\d.]+, median [\d.]+"
    assert re.search(figure, done.stdout), report
    assert broker.llen("free") == 0
