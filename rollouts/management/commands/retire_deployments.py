"""``python manage.py retire_deployments [--idle-s SECONDS]``: retire the versions nobody uses any more."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from rollouts.retirement import retire_idle_deployments


class Command(BaseCommand):
    help = (
        "Retires draining (or ready, weight 0) versions idle for DEPLOYMENT_RETIRE_IDLE_S, never a name's newest, "
        "the default or one in a running rollout."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--idle-s",
            type=float,
            default=None,
            help="Idle seconds before retiring (default DEPLOYMENT_RETIRE_IDLE_S).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        retired = retire_idle_deployments(idle_s=options["idle_s"])
        for row in retired:
            self.stdout.write(f"retired {row.key}: {row.status_reason}")
        if not retired:
            self.stdout.write("nothing to retire")
