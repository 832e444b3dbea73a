"""``python manage.py run_dispatcher``: the fair scheduler between the queued runs and the Celery tier queues."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from runs.dispatcher_wiring import build_dispatcher


class Command(BaseCommand):
    help = "Moves admitted runs into the Celery tier queues in fair order while the engines have room."

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        dispatcher = build_dispatcher()
        self.stdout.write(f"dispatcher {dispatcher.token[:8]} running (tiers: {', '.join(dispatcher.store.tiers)})")
        dispatcher.run_forever(stop)
        self.stdout.write("dispatcher stopped")
