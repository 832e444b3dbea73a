"""The CPU of Celery's publish of ``generate`` tasks alone: ``generation.worker_contract.send_generates`` in a loop.

The dispatcher's sends are most of its CPU per decision (``bench/dispatcher_ceiling.py``); this times them alone,
with no Postgres and no policy around them. ``--batch`` messages go out per call (one tick's batch, through one
producer and one pipeline), ``--calls`` calls make a block, and each of ``--blocks`` blocks is timed by this process's
CPU clock. Prints ms of CPU per message: the fastest block and the median. The messages pile up in the broker
database (nobody consumes them), which is flushed first and after.

    source scripts/redis-env.sh
    .venv/bin/python bench/send_generates_cpu.py --redis-url "$(redis_url 15)" --broker-url "$(redis_url 2)"
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.stack import flush_redis  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--queue", default="free")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--broker-url", required=True)
    args = parser.parse_args(argv)

    os.environ.update(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="WARNING",
    )
    flush_redis(args.broker_url)
    import django

    django.setup()
    from generation.worker_contract import GenerateMessage, send_generates

    messages = [GenerateMessage(run_id=i, queue=args.queue, engine_priority=21) for i in range(args.batch)]
    if any(send_generates(messages)):  # warm: the producer's connection, the queue's declaration
        print("the broker refused the first batch", file=sys.stderr)
        return 1
    per_message: list[float] = []
    try:
        for _ in range(args.blocks):
            started = time.process_time()
            for _ in range(args.calls):
                send_generates(messages)
            per_message.append(1000 * (time.process_time() - started) / (args.calls * args.batch))
    finally:
        flush_redis(args.broker_url)
    print(
        f"{args.blocks} blocks of {args.calls} batches of {args.batch}: ms of CPU per message min "
        f"{min(per_message):.3f}, median {statistics.median(per_message):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
