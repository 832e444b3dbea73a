"""``make run``, then prompts at once: a bar of what each prompt got while the stack comes up.

Starts ``make run`` (bootstrap, Postgres/Redis, migrations, web, prepare_model, worker, dispatcher, Flower) on a
fresh model cache, so the default model really is prepared while prompts arrive, and posts a prompt every
``--interval`` seconds from the moment the web port answers. Each attempt is one character:

    ``5`` a documented 503 (model not ready, ``Retry-After``)   ``#`` 202 accepted   ``X`` any other 5xx
    ``?`` anything else (connection refused is not counted: the port was not open yet)

It stops once ``--answers`` prompts have ended ``done`` and prints the bar, the counts (target: 0 ``X``), and
when the port opened, the first 202 and the first answer came. Loopback only; everything it started is stopped.

    .venv/bin/python bench/startup_bar.py [--port 8311] [--answers 3] [--timeout 900]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def call(method: str, url: str, *, token: str = "", body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if token:
        request.add_header("Authorization", f"Token {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw or b"null")
        except json.JSONDecodeError:
            return exc.code, raw.decode(errors="replace")[:200]


def bench_user_token(env: dict[str, str]) -> str:
    """A fresh pro-tier user of its own (no runs left over from an earlier start), and its API token."""
    code = (
        "import secrets; from accounts.models import Tier, User; from rest_framework.authtoken.models import Token; "
        "u = User.objects.create(username='startup-bar-' + secrets.token_hex(4), tier=Tier.objects.get(name='pro')); "
        "print(Token.objects.create(user=u).key)"
    )
    python = str(ROOT / ".venv" / "bin" / "python")
    done = subprocess.run(
        [python, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, capture_output=True, check=True
    )
    return done.stdout.decode().strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8311)
    parser.add_argument("--answers", type=int, default=3, help="stop after this many prompts ended done")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between prompts")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--max-pending", type=int, default=4, help="prompts in flight at most")
    args = parser.parse_args()

    cache = Path(tempfile.mkdtemp(prefix="startup-bar-models-"))
    env = {
        **os.environ,
        "PORT": str(args.port),
        "MODEL_CACHE_DIR": str(cache),  # a fresh cache: prepare_model prepares the model during the run
        "WORKER_METRICS_PORT": "0",
        "FLOWER_PORT": str(args.port + 1),
    }
    log = (ROOT / "artifacts").resolve()
    log.mkdir(exist_ok=True)
    stack = subprocess.Popen(
        ["make", "run", f"PORT={args.port}"],
        cwd=ROOT,
        env=env,
        stdout=(log / "startup-bar-stack.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{args.port}"
    started = time.monotonic()
    bar: list[str] = []
    counts = {"503": 0, "202": 0, "5xx": 0, "other": 0}
    marks: dict[str, float] = {}
    pending: list[int] = []
    done = 0
    token = ""
    chat_id = 0
    try:
        while done < args.answers:
            if time.monotonic() - started > args.timeout:
                print(f"timed out after {args.timeout:.0f} s", file=sys.stderr)
                break
            if stack.poll() is not None:
                print(f"make run exited ({stack.returncode}); see {log / 'startup-bar-stack.log'}", file=sys.stderr)
                break
            time.sleep(args.interval)
            try:
                if not token:
                    if call("GET", f"{base}/healthz")[0] != 200:
                        continue
                    marks.setdefault("port open", time.monotonic() - started)
                    token = bench_user_token(env)
                for run_id in list(pending):
                    status, run = call("GET", f"{base}/api/runs/{run_id}", token=token)
                    if status == 200 and run["status"] in ("done", "cancelled", "failed"):
                        pending.remove(run_id)
                        if run["status"] == "done":
                            done += 1
                            marks.setdefault("first answer", time.monotonic() - started)
                if len(pending) >= args.max_pending:
                    continue  # the demo user's concurrency cap: wait for answers rather than collect 429s
                if not chat_id:
                    status, chat = call("POST", f"{base}/api/chats", token=token, body={})
                    chat_id = chat["id"] if status == 201 else 0
                if not chat_id:
                    continue
                prompt = {"content": "What is the capital of France?", "max_tokens": 16}
                status, body = call("POST", f"{base}/api/chats/{chat_id}/messages", token=token, body=prompt)
            except (urllib.error.URLError, OSError):
                continue
            if status == 503:
                counts["503"] += 1
                bar.append("5")
            elif status == 202:
                counts["202"] += 1
                bar.append("#")
                marks.setdefault("first 202", time.monotonic() - started)
                pending.append(body["run"]["id"])
                chat_id = 0  # the chat has an answer in progress: the next prompt goes to a new one
            elif status >= 500:
                counts["5xx"] += 1
                bar.append("X")
                print(f"{status}: {body}", file=sys.stderr)
            else:
                counts["other"] += 1
                bar.append("?")
    finally:
        os.killpg(stack.pid, signal.SIGINT)
        try:
            stack.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(stack.pid, signal.SIGKILL)
    for start in range(0, len(bar), 100):
        print("".join(bar[start : start + 100]))
    print(
        f"attempts {len(bar)}: 503 {counts['503']}, 202 {counts['202']}, other 5xx {counts['5xx']}, "
        f"other {counts['other']}; answers done {done}"
    )
    print("  ".join(f"{name} {at:.1f} s" for name, at in marks.items()) + "  (from `make run`)")
    return 0 if counts["5xx"] == 0 and done >= args.answers else 1


if __name__ == "__main__":
    raise SystemExit(main())
