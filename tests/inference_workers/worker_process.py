"""A stand-in worker process for the killed-worker test: one runtime, one run, then it waits to be killed.

Usage: ``python tests/inference_workers/worker_process.py RUN_ID`` with the test's database and Redis in the
environment; it runs the same code a Celery task thread runs (``generate_run``) on the engine the
environment selects.
"""

from __future__ import annotations

import os
import sys

import django


def main() -> None:
    sys.path.insert(0, os.getcwd())
    django.setup()
    from deployments.tokenizer import get_tokenizer
    from inference_workers.runtime import start_runtime
    from inference_workers.services import generate_run

    runtime = start_runtime(worker_name=os.environ.get("WORKER_NAME", "doomed@test"))
    # As the Celery worker's start does (inference_workers.signals): the first run does not import transformers.
    # That import holds the GIL for seconds at a time on a busy CI machine, long enough for the heartbeat thread
    # to miss the run's lease refresh (its TTL here is a few seconds) and the reaper to take a live worker's run.
    get_tokenizer()
    generate_run(run_id=int(sys.argv[1]), runtime=runtime)


if __name__ == "__main__":
    main()
