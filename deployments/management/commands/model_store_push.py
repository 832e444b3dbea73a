"""``python manage.py model_store_push FOLDER s3://bucket/prefix/``: verify a model folder, publish it to the store.

The folder is verified as registration verifies it (config, tokenizer, chat template, weights that open) before a
byte is uploaded; the checksum printed is the one a deployment registered from the URL records, and the one every
worker host's copy must have (docs/deployments.md, "Model store and per-host caches").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from deployments.model_store import (
    ModelStoreError,
    describe_store,
    ensure_bucket,
    parse_store_url,
    store_client,
    upload_folder,
)
from deployments.verification import RegistrationError, verify_model_folder


class Command(BaseCommand):
    help = "Verifies a Hugging Face model folder and uploads it to the model store at s3://bucket/prefix/."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder", help="The model folder (config.json, tokenizer files, *.safetensors).")
        parser.add_argument("url", help="Where in the store: s3://bucket/prefix/ (one prefix per version).")
        parser.add_argument(
            "--kind", choices=["generate", "embed"], default="generate", help="What it serves (how it is verified)."
        )
        parser.add_argument(
            "--replace", action="store_true", help="Overwrite a prefix that already holds files (deletes them first)."
        )
        parser.add_argument("--create-bucket", action="store_true", help="Create the bucket if it does not exist.")

    def handle(self, *args: Any, **options: Any) -> None:
        folder = Path(options["folder"]).expanduser().resolve()
        try:
            location = parse_store_url(options["url"])
            checksum = verify_model_folder(folder, kind=options["kind"])
            client = store_client()
            if options["create_bucket"] and ensure_bucket(client, location):
                self.stdout.write(f"created the bucket {location.bucket}")
            files, size = upload_folder(client, folder, location, replace=options["replace"])
        except (ModelStoreError, RegistrationError) as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"published {files} files ({size / 2**20:.1f} MB) to {location.url} at {describe_store()}")
        self.stdout.write(f"  sha256: {checksum}")
        self.stdout.write(f"  register it: manage.py deployment_register NAME VERSION --source {location.url}")
