"""The cost of ``run_finish``'s locking read, with every relation it used to join and with those it joins now.

Each read runs ``--reads`` times, each in a transaction of its own (as ``run_finish`` does), on the newest run of the
database given (a database a benchmark filled, say ``bench/serving_ceiling.py``'s); prints ms of this process's CPU
and ms of wall time per read, then Postgres's planning time of each (``EXPLAIN (SUMMARY)``, the fastest of five).
Postgres plans every statement afresh (Django's cursors bind on the client), so a join's planning is paid per run.

    source scripts/redis-env.sh
    .venv/bin/python bench/finish_read_cost.py \\
        --database-url postgres://chat:chat@127.0.0.1:5432/chat_ceil_w --redis-url "$(redis_url 13)"
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BEFORE = ("chat", "tier", "user__tier", "user__limit_override", "deployment", "replaces")
"""What ``run_finish`` joined until 2026-12-07."""
NOW = ("chat", "tier", "user__tier", "user__limit_override")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--redis-url", required=True)
    args = parser.parse_args(argv)
    from bench.lib.stack import setup_django

    setup_django(DATABASE_URL=args.database_url, REDIS_URL=args.redis_url)
    from django.db import connection, transaction

    from runs.models import Run

    run_id = Run.objects.order_by("-pk").values_list("pk", flat=True).first()
    if run_id is None:
        print("no run in this database: run a benchmark into it first", file=sys.stderr)
        return 1

    def query(related: tuple[str, ...]) -> Any:
        return Run.objects.select_for_update(of=("self", "chat")).select_related(*related).filter(pk=run_id)

    def read(related: tuple[str, ...]) -> Callable[[], None]:
        def once() -> None:
            with transaction.atomic():
                query(related).get()

        return once

    for _ in range(args.rounds):
        for name, related in (("before", BEFORE), ("now", NOW)):
            once = read(related)
            once()
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(args.reads):
                once()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            print(
                f"{name:>6}: {1000 * cpu / args.reads:.2f} ms CPU, {1000 * wall / args.reads:.2f} ms wall per read",
                flush=True,
            )
    for name, related in (("before", BEFORE), ("now", NOW)):
        planning: list[float] = []
        for _ in range(5):
            with transaction.atomic(), connection.cursor() as cursor:
                sql, params = query(related).query.sql_with_params()
                cursor.execute("EXPLAIN (SUMMARY) " + sql, params)
                plan = "\n".join(row[0] for row in cursor.fetchall())
            found = re.search(r"Planning Time: ([\d.]+)", plan)
            if found is not None:
                planning.append(float(found.group(1)))
        print(f"{name:>6}: planning {min(planning):.2f} ms (the run with {', '.join(related)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
