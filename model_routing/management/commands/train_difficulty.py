"""``python manage.py train_difficulty``: retrain the difficulty classifier from ``model_routing/data/difficulty.jsonl``
and write ``model_routing/data/difficulty_weights.json`` (``--check``: only say whether the committed file matches)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from model_routing.difficulty import WEIGHTS_PATH, default_model
from model_routing.training import train

TOLERANCE = 1e-4
"""Weights may differ in their last digits between BLAS builds; a retrain "matches" within this."""


def same_weights(committed: dict[str, Any], retrained: dict[str, Any]) -> bool:
    """Whether two weight files hold the same model (every weight within :data:`TOLERANCE`)."""
    if {k: v for k, v in committed.items() if k not in ("bias", "dense", "hashed")} != {
        k: v for k, v in retrained.items() if k not in ("bias", "dense", "hashed")
    }:
        return False
    pairs = [(committed["bias"], retrained["bias"])]
    for part in ("dense", "hashed"):
        keys = set(committed[part]) | set(retrained[part])
        pairs += [(committed[part].get(k, 0.0), retrained[part].get(k, 0.0)) for k in keys]
    return all(abs(float(a) - float(b)) <= TOLERANCE for a, b in pairs)


class Command(BaseCommand):
    help = "Trains the router's difficulty classifier (logistic regression) and writes its weights as JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--check", action="store_true", help="Write nothing; fail when the committed weights differ from a retrain."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        result = train()
        self.stdout.write(
            f"trained on {result.train_size} prompts (agreement {result.train_agreement:.3f}); "
            f"held out {result.held_out_size} (agreement {result.held_out_agreement:.3f})"
        )
        text = json.dumps(result.model.to_json(), indent=0, sort_keys=True) + "\n"
        if options["check"]:
            if not same_weights(json.loads(WEIGHTS_PATH.read_text()), result.model.to_json()):
                raise CommandError(f"{WEIGHTS_PATH} differs from a retrain: run manage.py train_difficulty")
            self.stdout.write("committed weights match")
            return
        WEIGHTS_PATH.write_text(text)
        default_model.cache_clear()
        self.stdout.write(f"wrote {WEIGHTS_PATH}")
