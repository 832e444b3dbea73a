"""``python manage.py model_cache_fill [NAME@VERSION]``: fill this host's copy of a deployment now, as a worker does.

With ``MODEL_CACHE_MODE=per_host`` it resolves the deployment (``WORKER_DEPLOYMENT`` when none is named, else the
default) exactly as a starting worker does: a missing or unverified copy of an ``s3`` deployment is downloaded from
the store into a staging folder, checked against the recorded checksum and renamed into place; any failure exits
non-zero with the reason (and is reported ``failed`` for the admin). Useful to warm a host before its workers start.
"""

from __future__ import annotations

import socket
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inference_workers.deployment import DeploymentNotServable, find_worker_deployment


class Command(BaseCommand):
    help = "Fills and verifies this host's copy of a deployment (MODEL_CACHE_MODE=per_host), as a worker start does."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("deployment", nargs="?", default=None, help="name@version (default: WORKER_DEPLOYMENT).")
        parser.add_argument(
            "--worker", default=f"fill@{socket.gethostname()}", help="The name its reports carry in the admin."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        wanted = options["deployment"]
        if wanted is None:
            wanted = settings.DEPLOYMENTS.worker_deployment
        try:
            served = find_worker_deployment(wanted, worker=options["worker"])
        except DeploymentNotServable as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{served.key}: {served.local_path} ({settings.MODEL_STORE.cache_mode} cache)")
