"""``python manage.py healthcheck web|worker|dispatcher``: exit 0 when that process is alive and working.

For container health checks (``docker-compose.yml``), where the image has Python but no curl:

* ``web``: ``/healthz`` answers on ``--port`` (liveness; ``/readyz`` says whether it can take prompts).
* ``worker``: the worker's heartbeat is in Redis (``--worker``, default ``worker@<hostname>``): its engine is
  built and its heartbeat thread runs.
* ``dispatcher``: the leading dispatcher wrote its gate state within the last few seconds.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.redis_client import get_redis
from generation.worker_contract import worker_heartbeat
from runs.dispatcher_figures import STATE_KEY


class Command(BaseCommand):
    help = "Exit 0 when the web, a worker or the dispatcher is alive (container health checks)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("process", choices=["web", "worker", "dispatcher"])
        parser.add_argument("--port", type=int, default=8000, help="web: the port it listens on")
        parser.add_argument("--worker", default="", help="worker: its Celery name (default worker@<hostname>)")

    def handle(self, *args: Any, **options: Any) -> None:
        process = options["process"]
        if process == "web":
            url = f"http://127.0.0.1:{options['port']}/healthz"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    ok = response.status == 200
            except (urllib.error.URLError, OSError) as exc:
                raise CommandError(f"web: {url} did not answer ({exc})") from exc
            if not ok:
                raise CommandError(f"web: {url} answered {response.status}")
        elif process == "worker":
            name = options["worker"] or f"worker@{socket.gethostname()}"
            if worker_heartbeat(name) is None:
                raise CommandError(f"worker: no heartbeat from {name} (engine not built yet, or the worker is gone)")
        elif not get_redis().exists(STATE_KEY):
            raise CommandError("dispatcher: no gate state written lately (not running, or not the leader)")
        self.stdout.write(f"{process}: ok")
