"""The Celery application shared by the web, the dispatcher and the GPU workers."""

import logging.config
import os
from typing import Any

from celery import Celery
from celery.signals import setup_logging
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")

app = Celery("chatproject")
app.config_from_object("chatproject.celery_settings:CELERY", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect(dispatch_uid="chatproject.logging")
def configure_worker_logging(**kwargs: Any) -> None:
    """Workers log like every other process (``LOG_FORMAT``, ``LOG_LEVEL``, docs/operations.md "Logs").

    Without a receiver of this signal Celery replaces the root handler with its own format, and a worker's
    run events would lose their fields; ``--loglevel`` is then ignored in favour of ``LOG_LEVEL``.
    """
    logging.config.dictConfig(settings.LOGGING)
