"""Celery's configuration: the ``CELERY_*`` Django settings copied into a plain dict.

Celery imports this module lazily, the first time it needs its configuration (after Django's settings are
configured). Pointing Celery at ``django.conf:settings`` itself made every configuration read go through Django's
lazy settings object, and Celery tries a missing key under several names, each a failed ``getattr``: a
``send_task`` reads about 30 settings, and that was a fifth of the dispatcher's CPU per run sent
(docs/benchmarks.md, "Dispatcher ceiling"). Django settings do not change while a process runs.
"""

from typing import Any

from django.conf import settings

CELERY: dict[str, Any] = {name: getattr(settings, name) for name in dir(settings) if name.startswith("CELERY_")}
