"""``python manage.py deployment_rollout NAME --to VERSION [--steps 10,25,50,100] ...``: a red-black rollout.

Prints each step's figures and verdict; exits 1 with the reason when the rollout is refused or rolled back.
Interrupting it (Ctrl-C) rolls the weights back (the rollout ends ``failed``). ``--abort`` rolls back a rollout of
the name left ``running`` by a command that could not clean up (killed with SIGKILL, its host lost).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from deployments.models import Rollout, RolloutStatus
from rollouts.health import RolloutThresholds
from rollouts.services import DEFAULT_STEPS, RolloutRefused, rollout_execute, rollout_rollback

_DEFAULTS = RolloutThresholds()


def _steps(raw: str) -> list[int]:
    try:
        return [int(part) for part in raw.split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(
            f"--steps takes whole percentages separated by commas (e.g. 10,25,50,100), not {raw!r}."
        ) from exc


class Command(BaseCommand):
    help = "Moves a model name's traffic to another version in steps, with a health check and rollback at each."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The model name whose traffic moves.")
        parser.add_argument("--to", dest="version", help="The version that takes the traffic.")
        parser.add_argument(
            "--abort",
            action="store_true",
            help="Roll back the name's running rollout (one whose command died) instead of starting one.",
        )
        parser.add_argument("--steps", default=",".join(map(str, DEFAULT_STEPS)), help="Target weights in percent.")
        parser.add_argument("--step-wait", type=float, default=_DEFAULTS.step_wait_s, help="Least seconds per step.")
        parser.add_argument(
            "--step-timeout", type=float, default=_DEFAULTS.step_timeout_s, help="Most seconds a step waits for runs."
        )
        parser.add_argument(
            "--min-runs", type=int, default=_DEFAULTS.min_runs, help="Runs that must end on the target per step."
        )
        parser.add_argument(
            "--max-failed-rate", type=float, default=_DEFAULTS.max_failed_rate, help="Share of failed runs allowed."
        )
        parser.add_argument(
            "--max-ttft-ratio",
            type=float,
            default=_DEFAULTS.max_ttft_p99_ratio,
            help="Target's TTFT p99 over the old version's allowed.",
        )
        parser.add_argument(
            "--min-ttft-runs",
            type=int,
            default=_DEFAULTS.min_ttft_runs,
            help="Runs with a first token each version needs in a step before their TTFT p99 are compared.",
        )
        parser.add_argument(
            "--max-negative-feedback-delta",
            type=float,
            default=_DEFAULTS.max_negative_feedback_delta,
            help="Feedback-gated steps: fail a step when the share of 'down' ratings of the new version's answers is "
            "more than this above the old version's (0.1 = ten points). Default: feedback not checked.",
        )
        parser.add_argument(
            "--min-feedback-ratings",
            type=int,
            default=_DEFAULTS.min_feedback_ratings,
            help="Ratings each version needs in a step before their negative shares are compared (a gated step waits "
            "for them until --step-timeout).",
        )
        parser.add_argument("--poll", type=float, default=2.0, help="Seconds between looks at the step's runs.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["abort"]:
            self._abort(options["name"])
            return
        if not options["version"]:
            raise CommandError("Say which version takes the traffic: --to VERSION (or --abort).")
        thresholds = RolloutThresholds(
            max_failed_rate=options["max_failed_rate"],
            max_ttft_p99_ratio=options["max_ttft_ratio"],
            min_runs=options["min_runs"],
            min_ttft_runs=options["min_ttft_runs"],
            max_negative_feedback_delta=options["max_negative_feedback_delta"],
            min_feedback_ratings=options["min_feedback_ratings"],
            step_wait_s=options["step_wait"],
            step_timeout_s=options["step_timeout"],
        )
        try:
            rollout = rollout_execute(
                name=options["name"],
                to_version=options["version"],
                steps=_steps(options["steps"]),
                thresholds=thresholds,
                report=self.stdout.write,
                poll_s=options["poll"],
            )
        except RolloutRefused as exc:
            raise CommandError(f"Refused: {exc.message}") from exc
        if rollout.status != RolloutStatus.SUCCEEDED:
            raise CommandError(f"Rolled back: {rollout.reason}")

    def _abort(self, name: str) -> None:
        running = Rollout.objects.filter(name=name, status=RolloutStatus.RUNNING).first()
        if running is None:
            raise CommandError(f"No rollout of {name!r} is running.")
        rolled = rollout_rollback(
            running, "aborted by the operator (deployment_rollout --abort)", status=RolloutStatus.FAILED
        )
        self.stdout.write(f"rollout {rolled.pk} of {name}: rolled back, weights as before it started")
