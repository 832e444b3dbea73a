"""The parts of ``bench/e2e_vs_vllm_bench.py`` that run without an engine: its command line (which must not
import vLLM), the ``/proc`` CPU accounting and the reading of py-spy's profiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.e2e_vs_vllm_bench import parse_args
from bench.lib import proc_cpu, pyspy_profile
from bench.lib.processes import ROOT
from bench.lib.serve_client import parse_result


def test_help_parses_without_importing_vllm() -> None:
    code = (
        "import sys; sys.argv = ['bench', '--help']\n"
        "try:\n    import bench.e2e_vs_vllm_bench as b; b.parse_args()\n"
        "except SystemExit:\n    pass\n"
        "print('vllm' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False False"
    assert "--quick" in out.stdout and "--profile" in out.stdout


def test_levels_and_prompt_counts_must_pair_up() -> None:
    args = parse_args(["--quick"])
    assert (args.levels, args.prompt_counts, args.rounds) == ([1, 8, 32], [3, 8, 32], 1)
    assert parse_args([]).prompt_counts == [12, 32, 128]
    with pytest.raises(SystemExit):
        parse_args(["--concurrency", "1,8", "--prompts", "12"])
    with pytest.raises(SystemExit):
        parse_args(["--concurrency", "64", "--prompts", "64"])


def test_own_cpu_seconds_grow_with_work_and_exclude_children() -> None:
    meter = proc_cpu.own_seconds(os.getpid())
    before = meter()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert meter() - before >= 0.2
    burn = "import time\nt = time.process_time() + 0.5\nwhile time.process_time() < t: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        mine = meter()
        time.sleep(1.5)
        assert child.pid in {s.pid for s in proc_cpu.descendants(os.getpid())}
        stat = proc_cpu.read_stat(child.pid)
        assert stat is not None and stat.own_s >= 0.4
        assert meter() - mine < 0.3  # the child's CPU is not ours
    finally:
        child.kill()
        child.wait()
    assert proc_cpu.read_stat(child.pid) is None


def test_profile_counts_own_time_at_the_innermost_frame(tmp_path: Path) -> None:
    frames = [{"name": n, "file": f"{ROOT}/app.py", "line": i} for i, n in enumerate(["main", "handle", "query"])]
    speedscope = {
        "shared": {"frames": frames},
        "profiles": [
            {"name": "Thread 1", "samples": [[0, 1, 2], [0, 1, 2], [0, 1], []], "weights": [0.01, 0.01, 0.02, 0.5]}
        ],
    }
    path = tmp_path / "p.speedscope.json"
    path.write_text(json.dumps(speedscope))
    profile = pyspy_profile.analyse("x", path)
    assert profile.busy_s == pytest.approx(0.04)
    own = dict(profile.own)
    assert own["handle (app.py:1)"] == pytest.approx(0.5) and own["query (app.py:2)"] == pytest.approx(0.5)
    assert dict(profile.total)["main (app.py:0)"] == pytest.approx(1.0)
    folded = path.with_suffix(".folded").read_text().splitlines()
    assert "Thread 1;main (app.py:0);handle (app.py:1);query (app.py:2) 0.02" in folded


def test_a_result_file_without_errors_or_failures_reads_as_such() -> None:
    data: dict[str, object] = {"completed": 3, "total_output_tokens": 192, "duration": 2.0, "output_throughput": 96.0}
    data |= {"median_ttft_ms": 10.0, "p99_ttft_ms": 30.0, "median_tpot_ms": 5.0, "p99_tpot_ms": 7.0}
    data |= {"errors": ["", "", "boom"]}
    result = parse_result(data, concurrency=1, prompts=4)
    assert (result.completed, result.failed, result.errors) == (3, 1, ["boom"])
    assert (result.output_tokens, result.tok_per_s, result.ttft_p99_ms) == (192, 96.0, 30.0)
