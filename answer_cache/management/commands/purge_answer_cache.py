"""``python manage.py purge_answer_cache``: delete the expired answer-cache entries and those of retired versions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from answer_cache.services import cache_purge


class Command(BaseCommand):
    help = (
        "Deletes the answer-cache entries past their TTL and those of retired deployment versions (run on a schedule)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        result = cache_purge()
        self.stdout.write(f"purged {result.expired} expired and {result.retired} retired-version entries")
