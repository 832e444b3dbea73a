"""The Celery application shared by the web, the dispatcher and the GPU workers."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")

app = Celery("chatproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
