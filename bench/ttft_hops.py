"""Where a lone request's time to first token goes, hop by hop, on the stand-in engine.

The serving ceiling's stack (:mod:`bench.lib.stand_in_stack`: one web process, the dispatcher, one Celery worker; the
stand-in engine at ``--rate`` tokens/s, so the engine's own share is one step) serves ``--requests`` streamed
``/v1/chat/completions`` calls one at a time (moderation off). Each hop's time comes from a clock of its own, all
on this machine:

- the request sent, and its first chunk with content read (this process);
- the run's row written (``Run.created_at``), claimed (``started_at``) and its first token (``first_token_at``);
- the run queued after its statement committed (the web's ``queued`` lifecycle record, logged just before the push
  is sent, to the millisecond: the processes log at ``INFO``, as shipped);
- the dispatcher's send, the worker's receipt and the task's start (Celery's ``task-sent``, ``task-received`` and
  ``task-started`` events, which Flower reads, taken here with Celery's own event receiver).

It prints each hop's median and minimum. The claim to the first token includes the stand-in's step (``1 / --rate``).

    source scripts/redis-env.sh
    .venv/bin/python bench/ttft_hops.py --database-url postgres://chat:chat@127.0.0.1:5432/chat_probe \\
        --redis-url "$(redis_url 13)" --broker-url "$(redis_url 14)"

It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.stand_in_stack import StandInConfig, prepare, start_stack, stop_stack  # noqa: E402

HOPS = (
    ("request -> run row", "sent", "created"),
    ("run row -> queued", "created", "queued"),
    ("queued -> dispatcher's send", "queued", "task-sent"),
    ("send -> worker's receipt", "task-sent", "task-received"),
    ("receipt -> task start", "task-received", "task-started"),
    ("task start -> claim", "task-started", "started"),
    ("claim -> first token", "started", "first_token"),
    ("first token -> client", "first_token", "client"),
    ("request -> first chunk (TTFT)", "sent", "client"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--warm-up", type=int, default=3)
    parser.add_argument("--pause-s", type=float, default=0.3, help="between two requests")
    parser.add_argument("--rate", type=float, default=40.0, help="the stand-in engine's tokens/s (one step)")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--broker-url", required=True)
    args = parser.parse_args(argv)
    config = StandInConfig(
        database_url=args.database_url,
        redis_url=args.redis_url,
        broker_url=args.broker_url,
        slots=16,
        rate=args.rate,
        lifecycle_log=True,
    )
    prepare(config)
    import httpx
    from django.conf import settings

    from bench.lib.stack import high_limits_user
    from runs.models import Run

    events = _CeleryEvents()
    logs = ROOT / "artifacts"
    logs.mkdir(exist_ok=True)
    stack = start_stack(config, logs, prefix="ttft-hops")
    try:
        token = high_limits_user()
        body = {
            "model": str(settings.ENGINE.served_model_name),
            "messages": [{"role": "user", "content": "Say something."}],
            "max_tokens": 4,
            "stream": True,
        }
        times: list[dict[str, float]] = []
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            for n in range(args.warm_up + args.requests):
                sent, first = _one_request(client, f"{stack.base_url}/v1/chat/completions", body)
                if n >= args.warm_up:
                    times.append({"sent": sent, "client": first})
                time.sleep(args.pause_s)
        time.sleep(1.0)  # the last events
        queued = _queued_at(logs / "ttft-hops-web.log")
        runs = list(
            Run.objects.order_by("-id")[: args.requests].values("id", "created_at", "started_at", "first_token_at")
        )
        for row, run in zip(times, reversed(runs), strict=True):
            row["created"] = run["created_at"].timestamp()
            if run["started_at"] is not None:  # (a run that failed before its claim: its later hops are left out)
                row["started"] = run["started_at"].timestamp()
            if run["first_token_at"] is not None:
                row["first_token"] = run["first_token_at"].timestamp()
            row.update(events.of_run(run["id"]))
            if run["id"] in queued:
                row["queued"] = queued[run["id"]]
    finally:
        stop_stack(stack)
    print(
        f"{args.requests} streamed /v1/chat/completions calls one at a time, stand-in engine at {args.rate:g} tok/s "
        f"(one step {1000 / args.rate:.0f} ms); ms per hop:"
    )
    for name, start, end in HOPS:
        spans = [1000 * (row[end] - row[start]) for row in times if start in row and end in row]
        if spans:
            print(f"  {name:32s} p50 {statistics.median(spans):7.2f}  min {min(spans):7.2f}  ({len(spans)} calls)")
    return 0


def _queued_at(web_log: Path) -> dict[int, float]:
    """When the web process logged each run ``queued`` (``runs.lifecycle_log``: after the prompt's statement
    committed, just before the admission's pipeline pushes the run to the scheduler's queue, which wakes the
    dispatcher), by run; millisecond timestamps."""
    out: dict[int, float] = {}
    for line in web_log.read_text(errors="replace").splitlines():
        if '"queued"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("logger") == "runs.events" and record.get("event") == "queued":
            out[int(record["run_id"])] = datetime.fromisoformat(record["ts"]).timestamp()
    return out


def _one_request(client: Any, url: str, body: dict[str, Any]) -> tuple[float, float]:
    """When the request was sent and when its first chunk with content was read (epoch seconds)."""
    sent = time.time()
    first = 0.0
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not first and line.startswith("data:") and '"content"' in line:
                first = time.time()
    if not first:
        raise SystemExit("a call streamed no content")
    return sent, first


class _CeleryEvents:
    """Celery's task events, by run: the dispatcher's ``task-sent`` names the task's arguments (``[run_id]``)."""

    def __init__(self) -> None:
        self._by_task: dict[str, dict[str, float]] = {}
        self._run_of: dict[str, int] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._receive, name="celery-events", daemon=True).start()

    def _receive(self) -> None:
        from chatproject.celery import app

        with app.connection() as connection:
            app.events.Receiver(connection, handlers={"*": self._on_event}).capture(limit=None, timeout=None)

    def _on_event(self, event: dict[str, Any]) -> None:
        task = event.get("uuid")
        if not task or not str(event.get("type", "")).startswith("task-"):
            return
        with self._lock:
            self._by_task.setdefault(task, {})[event["type"]] = float(event["timestamp"])
            if event["type"] == "task-sent":
                run_args = str(event.get("args", "")).strip("[]() ,")
                if run_args.isdigit():
                    self._run_of[task] = int(run_args)

    def of_run(self, run_id: int) -> dict[str, float]:
        with self._lock:
            tasks = [task for task, run in self._run_of.items() if run == run_id]
            return dict(self._by_task[tasks[-1]]) if tasks else {}


if __name__ == "__main__":
    raise SystemExit(main())
