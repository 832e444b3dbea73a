"""Postgres plans a hot statement once per pooled connection, not once per run (``DB_SERVER_SIDE_BINDING``).

Django's default binds on the client: every value is quoted into the SQL text, so Postgres parses and plans every
statement afresh (the finish's locking read: 0.8 ms of planning a run, ``bench/finish_read_cost.py``). With
server-side binding psycopg sends the values apart and prepares a statement once it has run
``DB_PREPARE_THRESHOLD`` times on a connection. ``bench/run_path_cost.py`` measures the difference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from accounts.models import Tier
from bench.lib import processes
from bench.lib.processes import ROOT
from runs.models import Run
from tests.factories import RunFactory


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
def test_a_statement_run_past_the_threshold_on_a_connection_is_prepared() -> None:
    options = settings.DATABASES["default"]["OPTIONS"]
    assert options["server_side_binding"] is True
    threshold = options["prepare_threshold"]
    assert threshold == 5
    run = RunFactory.create()
    for _ in range(threshold - 1):
        assert Run.objects.select_related("chat", "tier").get(pk=run.pk).chat_id == run.chat_id
    assert not [s for s in _prepared_statements() if '"runs_run"' in s]  # not yet: under the threshold
    for _ in range(2):
        assert Run.objects.select_related("chat", "tier").get(pk=run.pk).tier_id == run.tier_id
    [prepared] = [s for s in _prepared_statements() if '"runs_run"' in s]
    assert '"runs_run"."id" = $1' in prepared  # the value is a parameter, not in the text
    assert Tier.objects.filter(name="free").exists()  # other statements still run beside it


def test_client_side_binding_stays_one_setting_away() -> None:
    """``DB_SERVER_SIDE_BINDING=false`` gives Django's default back (for a pooler that cannot keep prepared
    statements: PgBouncer in transaction mode before 1.21)."""
    code = "import django; django.setup(); from django.conf import settings as s; "
    code += "import json; print(json.dumps(s.DATABASES['default']['OPTIONS'], default=str))"
    env = {**os.environ, "DB_SERVER_SIDE_BINDING": "false", "DJANGO_SETTINGS_MODULE": "chatproject.settings.base"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    options = json.loads(done.stdout.strip().splitlines()[-1])
    assert "server_side_binding" not in options and "prepare_threshold" not in options
    assert "pool" in options  # the pool is its own setting


@pytest.mark.live
def test_the_run_path_bench_times_both_bindings() -> None:
    argv = [sys.executable, str(ROOT / "bench" / "run_path_cost.py"), "--runs", "10", "--rounds", "1"]
    argv += ["--database-url", f"{processes.test_database_url()}_run_path", "--redis-url", settings.REDIS_URL]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    lines = [line for line in done.stdout.splitlines() if "ms CPU, Postgres" in line]
    assert [line.split(":")[0].strip() for line in lines] == ["client", "server"], report
