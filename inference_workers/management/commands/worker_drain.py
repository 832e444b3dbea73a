"""``python manage.py worker_drain``: stop a worker consuming and wait for its runs in flight to end.

The Kubernetes ``preStop`` hook of a worker pod (``deploy/kubernetes``): through Celery's remote control it cancels
every queue the worker consumes (it takes no new run), then waits until the worker has no task active or
``--timeout`` passes. Kubernetes then sends SIGTERM, a warm shutdown; a run still going at the drain deadline goes on
on another worker from its streamed tokens. Exits 0 even when the worker does not answer: a hook that fails would
only delay the pod's stop.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from celery import current_app as app
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Stop a worker consuming and wait for its tasks to end (a worker pod's preStop hook)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--worker", default="", help="its Celery name (default worker@<hostname>)")
        parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for its tasks")
        parser.add_argument("--poll", type=float, default=2.0, help="seconds between checks")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["worker"] or f"worker@{socket.gethostname()}"
        inspect = app.control.inspect(destination=[name], timeout=5.0)
        queues = [q["name"] for q in (inspect.active_queues() or {}).get(name, [])]
        if not queues:
            self.stdout.write(f"worker_drain: {name} consumes nothing (or did not answer)")
        for queue in queues:
            app.control.cancel_consumer(queue, destination=[name], reply=True, timeout=5.0)
        self.stdout.write(f"worker_drain: {name} stopped consuming {', '.join(queues) or 'nothing'}")
        deadline = time.monotonic() + options["timeout"]
        while True:
            active = (inspect.active() or {}).get(name)
            if not active:
                self.stdout.write(f"worker_drain: {name} has no task in flight")
                return
            if time.monotonic() >= deadline:
                self.stdout.write(f"worker_drain: {name} still has {len(active)} task(s) at the deadline")
                return
            time.sleep(options["poll"])
