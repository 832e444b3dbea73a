"""``make hosts-test`` in its quick form (``bench/hosts_test.py --quick``): the product across network namespaces,
a data host (Postgres, Redis primary and replica, Sentinels, the S3 model store), a web host (two web processes
behind HAProxy), two worker hosts filling their own model caches from the store, two dispatcher hosts; a web
process killed, a worker host's link cut, the Redis primary killed, the dispatcher leader's host cut off, with
clients streaming throughout. Every row must count nothing lost, duplicated, stuck or 5xx, and both worker hosts
must have filled their caches from the store with the checksum verified. The ``--secure`` form runs every Redis,
Sentinel and Postgres link over TLS with a Redis ACL user per role, and must also show that it held: Postgres
sessions from the network all TLS and a plain login refused, a plain and an anonymous Redis connection refused,
each role's user connected, nothing any role did refused by the ACL.

About three minutes each here (most of it the model pushed to the store and the processes starting). Needs root and
``ip`` (scripts/test.sh installs iproute2 and HAProxy when missing).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lib.fault_servers import PG_BIN
from bench.lib.processes import ROOT

pytestmark = pytest.mark.live

SCRIPT = ROOT / "bench" / "hosts_test.py"
FAULTS = {"web_kill", "worker_host_down", "redis_primary_kill", "dispatcher_host_down"}


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secure"])
def test_the_quick_hosts_test_loses_nothing_and_fills_both_caches_from_the_store(tmp_path: Path, secure: bool) -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    missing = [t for t in ("ip", "haproxy", "redis-server") if shutil.which(t) is None]
    assert not missing, f"missing {missing}: scripts/test.sh installs them (scripts/hosts-test.sh)"
    assert (PG_BIN / "initdb").exists(), f"no Postgres server binaries in {PG_BIN} (set PG_BIN)"
    out = tmp_path / "figures.json"
    argv = [sys.executable, str(SCRIPT), "--quick", "--max-seconds", "420", "--json", str(out)]
    argv += ["--log-dir", str(ROOT / "artifacts" / f"hosts-test-ci{'-secure' if secure else ''}")]
    argv += ["--secure"] if secure else []
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    figures = json.loads(out.read_text())
    assert figures["ok"] and not figures["failed"], report
    rows = {r["fault"]: r for r in figures["results"]}
    assert set(rows) == FAULTS, report
    for name, row in rows.items():
        assert not row["skipped"] and row["runs"] > 0, (name, report)
        assert row["exact"] == row["runs"], (name, report)
        counts = (row["lost"], row["duplicated"], row["duplicate_messages"], row["stuck"], row["five_xx"])
        assert counts == (0, 0, 0, 0, 0), (name, report)
        assert row["recover_s"] is not None, (name, report)
        assert f"| {name} | {row['runs']} | {row['runs']} | 0 | 0 | 0 | 0 | 0 |" in done.stdout, report
    # Both worker hosts started with empty caches and filled them from the store, the checksum verified.
    checksum = figures["caches"]["checksum"]
    assert len(checksum) == 64, report
    for host in ("w1", "w2"):
        line = figures["caches"][host]
        assert "filled and verified" in line and f"sha256 {checksum[:12]}" in line, (host, report)
    assert "w1: model cache " in done.stdout and "w2: model cache " in done.stdout, report
    if secure:
        held = figures["security"]
        assert held["ok"], report
        assert held["postgres_tls_sessions"] > 0 and held["postgres_plain_sessions"] == 0, report
        assert "rejects connection" in held["postgres_plain_login_refused"], report
        assert held["redis_plain_refused"] and "auth" in held["redis_anonymous_refused"].lower(), report
        assert {"web", "worker", "dispatcher", "celery"} <= set(held["redis_users"]), report
        assert held["redis_acl_denied"] == [], report
    # Everything was torn down: no namespace or link of the run is left.
    prefix = figures["topology"]["prefix"]
    ours = {f"{prefix}br"} | {f"{prefix}-{h}" for h in figures["topology"]["hosts"]}
    ours |= {f"{prefix}{h}" for h in figures["topology"]["hosts"]}
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in namespaces.splitlines() if line.strip()}
    names |= {line.split(": ")[1].split("@")[0] for line in links.splitlines() if ": " in line}
    assert not ours & names, sorted(ours & names)
