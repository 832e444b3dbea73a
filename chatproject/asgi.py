"""ASGI entry point (uvicorn): the API, the SSE streams, the admin and the browser UI."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")

application = get_asgi_application()
