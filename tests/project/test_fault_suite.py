"""One fault of ``bench/fault_suite.py`` end to end: its own Postgres (``initdb``) and Redis, the real stack (web,
dispatcher, a Celery worker on the simulated engine), 10 runs whose clients hang up at random points and resume
with ``Last-Event-ID``. Nothing may be lost, duplicated or stuck, and no client may see a 5xx.

About a minute here (most of it the cluster, the migrations and the processes starting).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lib.processes import ROOT

SUITE = ROOT / "bench" / "fault_suite.py"


def _missing_servers() -> str:
    from bench.lib.fault_servers import PG_BIN

    if not (PG_BIN / "initdb").exists():
        return f"no Postgres server binaries in {PG_BIN} (set PG_BIN)"
    if shutil.which("redis-server") is None:
        return "no redis-server on PATH"
    return ""


@pytest.mark.live
def test_disconnects_lose_nothing(tmp_path: Path) -> None:
    missing = _missing_servers()
    if missing:
        pytest.skip(missing)
    out = tmp_path / "figures.json"
    argv = [sys.executable, str(SUITE), "--fault", "disconnects", "--runs", "10", "--max-seconds", "150"]
    argv += ["--json", str(out), "--log-dir", str(ROOT / "artifacts" / "fault-suite-test")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [figures] = json.loads(out.read_text())
    report = done.stdout + done.stderr
    assert figures["fault"] == "disconnects" and not figures["skipped"], report
    assert figures["runs"] == 10, report
    assert figures["exact"] == 10, report
    assert (figures["lost"], figures["duplicated"], figures["duplicate_messages"]) == (0, 0, 0), report
    assert (figures["stuck"], figures["five_xx"]) == (0, 0), report
    hang_ups = sum(o["client"]["planned_cuts"] for o in figures["outcomes"])
    assert hang_ups >= 5, report  # a cut drawn past the end of a short stream never happens
    assert "| disconnects | 10 | 10 | 0 | 0 | 0 | 0 | 0 |" in done.stdout


@pytest.mark.live
def test_a_redis_restart_and_a_killed_worker_lose_nothing(tmp_path: Path) -> None:
    """A real Redis restart mid-stream (its AOF kept), and ``kill -9`` of a worker while a second one runs: every
    run ends ``done`` with the streamed text equal to the stored answer (``--quick`` counts, about a minute)."""
    missing = _missing_servers()
    if missing:
        pytest.skip(missing)
    out = tmp_path / "figures.json"
    argv = [sys.executable, str(SUITE), "--fault", "redis_restart,worker_kill", "--quick", "--max-seconds", "400"]
    argv += ["--json", str(out), "--log-dir", str(ROOT / "artifacts" / "fault-suite-test")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=520)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    figures = {f["fault"]: f for f in json.loads(out.read_text())}
    assert set(figures) == {"redis_restart", "worker_kill"}, report
    for name, f in figures.items():
        assert not f["skipped"] and f["runs"] > 0, (name, report)
        assert f["exact"] == f["runs"], (name, report)
        assert (f["lost"], f["duplicated"], f["duplicate_messages"], f["stuck"], f["five_xx"]) == (0, 0, 0, 0, 0), (
            name,
            report,
        )
    # The worker's main process alone was killed: nothing of it may be left (inference_workers/engine/lifeline.py).
    assert any(n.startswith("engine-orphan check: nothing") for n in figures["worker_kill"]["notes"]), report


@pytest.mark.live
def test_the_outage_sweep_sees_no_5xx_but_503(tmp_path: Path) -> None:
    """Every URL pattern during a Redis pause and a Postgres stop of the suite's servers (about 3 minutes)."""
    missing = _missing_servers()
    if missing:
        pytest.skip(missing)
    out = tmp_path / "figures.json"
    argv = [sys.executable, str(SUITE), "--fault", "outage_sweep", "--max-seconds", "300"]
    argv += ["--json", str(out), "--log-dir", str(ROOT / "artifacts" / "fault-suite-test-sweep")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=420)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    [figures] = json.loads(out.read_text())
    assert not figures["skipped"] and figures["five_xx"] == 0, report
    sweeps = [n for n in figures["notes"] if n.startswith(("redis paused:", "postgres stopped:"))]
    assert len(sweeps) == 2 and all("no 5xx but 503" in n and "x 503" in n for n in sweeps), report
