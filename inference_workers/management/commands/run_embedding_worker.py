"""``python manage.py run_embedding_worker``: serve one embedding deployment
(``inference_workers.embedding_worker``)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.redis_client import get_redis
from deployments.defaults import DEFAULT_VERSION, EMBEDDING_MODEL_NAME
from deployments.embedding_model import EmbeddingModel
from deployments.models import DeploymentKind, DeploymentStatus, ModelDeployment, deployment_key
from inference_workers.embedding_worker import EmbeddingWorker

WAIT_S = 2.0


class Command(BaseCommand):
    help = "Serve an embedding deployment's /v1/embeddings requests (batched forward passes on this host's CPU)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--deployment", default="", help="name@version (default EMBEDDING_WORKER_DEPLOYMENT)")
        parser.add_argument("--name", default="", help="this worker's name (default embed@<hostname>:<pid>)")

    def handle(self, *args: Any, **options: Any) -> None:
        config = settings.EMBEDDINGS
        key = options["deployment"] or config.worker_deployment or deployment_key(EMBEDDING_MODEL_NAME, DEFAULT_VERSION)
        name, _, version = key.partition("@")
        row = self._wait_until_ready(name, version)
        model = EmbeddingModel(Path(row.local_path), threads=config.worker_threads)
        worker_name = options["name"] or f"embed@{socket.gethostname()}:{os.getpid()}"

        def status() -> str | None:
            found = ModelDeployment.objects.filter(name=row.name, version=row.version).values_list("status", flat=True)
            return next(iter(found), None)

        worker = EmbeddingWorker(
            deployment=row.key,
            model=model,
            name=worker_name,
            client=get_redis(),
            max_batch=config.worker_max_batch,
            status=status,
        )
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: worker.stop.set())
        self.stdout.write(
            f"run_embedding_worker: {worker_name} serves {row.key} ({model.spec.dimensions} dimensions, "
            f"{model.spec.max_tokens} tokens, batches of {config.worker_max_batch})",
        )
        self.stdout.flush()
        worker.run()
        self.stdout.write(f"run_embedding_worker: {worker_name} stopped after {worker.served_inputs} inputs")

    def _wait_until_ready(self, name: str, version: str) -> ModelDeployment:
        """The deployment once it is ``ready`` (``prepare_model`` or a registration makes it so)."""
        announced = False
        while True:
            row = ModelDeployment.objects.filter(name=name, version=version).first()
            if row is None or not version:
                raise CommandError(f"There is no deployment {name}@{version}: register it, or migrate.")
            if row.kind != DeploymentKind.EMBED:
                raise CommandError(f"{row.key} is a {row.kind} deployment, not an embedding one.")
            if row.status in (DeploymentStatus.RETIRED, DeploymentStatus.FAILED):
                raise CommandError(f"{row.key} is {row.status}: {row.status_reason or 'nothing to serve'}.")
            if row.status == DeploymentStatus.READY:
                return row
            if not announced:
                self.stdout.write(f"run_embedding_worker: waiting for {row.key} to be ready ({row.status})")
                self.stdout.flush()
                announced = True
            time.sleep(WAIT_S)
