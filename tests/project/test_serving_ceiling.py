"""``bench/serving_ceiling.py --quick`` end to end: vLLM's own benchmark client streams ``/v1/chat/completions``
through one web process, the dispatcher and a Celery worker whose engine is the stand-in at a GPU's shape (a step of
25 ms whatever the batch). Every request must finish with every token it asked for (``ignore_eos`` honoured the
whole way), and the bench must account CPU to each of our processes. It asserts no speed: the figures are printed.

About 80 s here (the client imports vLLM's benchmark module; the stack starts).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from bench.lib import processes
from bench.lib.processes import ROOT

BENCH = ROOT / "bench" / "serving_ceiling.py"


@pytest.mark.live
def test_the_quick_form_serves_every_token_and_accounts_cpu(tmp_path: Path) -> None:
    out = tmp_path / "levels.json"
    argv = [sys.executable, str(BENCH), "--quick", "--json", str(out)]
    argv += ["--database-url", f"{processes.test_database_url()}_ceiling"]
    argv += ["--redis-url", settings.REDIS_URL, "--broker-url", settings.CELERY_BROKER_URL]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    [level] = json.loads(out.read_text())
    assert (level["completed"], level["failed"]) == (level["prompts"], 0), report
    assert level["output_tokens"] == level["expected_tokens"], report
    for process in ("web", "worker", "dispatcher"):
        assert level["cpu_s"][process] > 0, (process, report)
    assert "ceiling:" in done.stdout and "chunk gap (ITL) p99" in done.stdout, report


@pytest.mark.live
def test_the_ttft_hops_bench_times_every_hop_of_a_lone_request() -> None:
    """``bench/ttft_hops.py`` in short form: each hop is timed for every call (Celery's events matched to their
    runs), and the hops add up to the time to first token the client saw."""
    argv = [sys.executable, str(ROOT / "bench" / "ttft_hops.py"), "--requests", "5", "--warm-up", "1"]
    argv += ["--database-url", f"{processes.test_database_url()}_ttft_hops"]
    argv += ["--redis-url", settings.REDIS_URL, "--broker-url", settings.CELERY_BROKER_URL]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    hops = {
        line.split(" p50 ")[0].strip(): line
        for line in done.stdout.splitlines()
        if " p50 " in line and line.rstrip().endswith("(5 calls)")
    }
    assert len(hops) == 9, report  # every hop, for every call
    assert "request -> first chunk (TTFT)" in hops and "run row -> queued" in hops, report
