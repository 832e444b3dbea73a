"""``python manage.py deployment_register NAME VERSION``: register a model version, materialize and verify it.

``--source packaged`` (the default) copies the packaged SmolLM2 folder; ``--source PATH`` copies a Hugging Face
model folder into the model cache; with ``--serve-in-place`` the folder is served where it is (a shared volume);
``--source s3://bucket/prefix/`` downloads the folder from the model store (``MODEL_STORE_*``; publish one with
``manage.py model_store_push``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from deployments.model_store import S3_SCHEME
from deployments.models import SourceKind
from deployments.registration import RegistrationError, register_deployment


class Command(BaseCommand):
    help = "Registers NAME@VERSION: validates it, copies its weights to the model cache, verifies and checksums them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The model name clients send (letters, digits, '.', '_', '-').")
        parser.add_argument("version", help="This version's label, e.g. v2.")
        parser.add_argument(
            "--source",
            default=SourceKind.PACKAGED.value,
            help="'packaged' (the default: SmolLM2-135M-Instruct), the path of a Hugging Face model folder, or "
            "s3://bucket/prefix/: that folder in the model store (MODEL_STORE_ENDPOINT_URL...).",
        )
        parser.add_argument(
            "--serve-in-place", action="store_true", help="Serve --source PATH where it is instead of copying it."
        )
        parser.add_argument(
            "--engine-arg",
            action="append",
            default=[],
            metavar="KEY=JSON",
            help="A vLLM engine argument, the value as JSON: max_model_len=2048, dtype='\"float16\"' (repeatable).",
        )
        parser.add_argument("--weight", type=int, default=0, help="Traffic weight 0-100 (default 0).")
        parser.add_argument("--default", action="store_true", help="Make it the default deployment once ready.")
        parser.add_argument(
            "--kind",
            choices=["generate", "embed"],
            default="generate",
            help="What it serves: text generation (default) or embeddings (/v1/embeddings; --source packaged is "
            "all-MiniLM-L6-v2).",
        )

        parser.add_argument(
            "--cost-input",
            default="0",
            metavar="COST",
            help="Cost per million prompt tokens (default 0; the router's cost figures use it).",
        )
        parser.add_argument(
            "--cost-output", default="0", metavar="COST", help="Cost per million answer tokens (default 0)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source_kind, source_path = source_of(options["source"], serve_in_place=options["serve_in_place"])
        try:
            row = register_deployment(
                name=options["name"],
                version=options["version"],
                source_kind=source_kind,
                source_path=source_path,
                engine_args=parse_engine_args(options["engine_arg"]),
                traffic_weight=options["weight"],
                make_default=options["default"],
                kind=options["kind"],
                cost_per_million_input_tokens=options["cost_input"],
                cost_per_million_output_tokens=options["cost_output"],
            )
        except RegistrationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"{row.key}: {row.status}{' (default)' if row.is_default else ''}")
        self.stdout.write(f"  local_path: {row.local_path}")
        self.stdout.write(f"  checksum:   {row.checksum}")


def source_of(source: str, *, serve_in_place: bool) -> tuple[str, str]:
    """``(source_kind, source_path)`` from ``--source`` and ``--serve-in-place``."""
    if source == SourceKind.PACKAGED:
        if serve_in_place:
            raise CommandError("--serve-in-place needs --source PATH (the packaged model is always copied).")
        return SourceKind.PACKAGED, ""
    if source.startswith(S3_SCHEME):
        if serve_in_place:
            raise CommandError("--serve-in-place needs a local folder: a model store's folder is always downloaded.")
        return SourceKind.S3, source
    return (SourceKind.PATH if serve_in_place else SourceKind.HF_FOLDER), source


def parse_engine_args(items: list[str]) -> dict[str, Any]:
    """``["max_model_len=2048", ...]`` as ``{"max_model_len": 2048}``; :class:`CommandError` for a malformed one."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--engine-arg '{item}' is not KEY=JSON, e.g. --engine-arg max_model_len=2048.")
        try:
            parsed[key.strip()] = json.loads(raw)
        except ValueError as exc:
            raise CommandError(
                f"--engine-arg '{item}': the value is not JSON ({exc}); "
                "quote strings: --engine-arg 'dtype=\"float16\"'."
            ) from exc
    return parsed
