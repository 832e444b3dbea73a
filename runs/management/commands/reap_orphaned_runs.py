"""``python manage.py reap_orphaned_runs [--loop SECONDS]``: requeue or fail runs whose worker died."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.reaper import reap_orphaned_runs


class Command(BaseCommand):
    help = "Requeues (or fails after the attempt limit) streaming runs whose worker heartbeat vanished."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", type=float, default=0.0, help="Repeat every this many seconds.")

    def handle(self, *args: Any, **options: Any) -> None:
        while True:
            handled = reap_orphaned_runs()
            if handled:
                self.stdout.write(f"reaped runs: {', '.join(map(str, handled))}")
            if not options["loop"]:
                return
            time.sleep(options["loop"])
