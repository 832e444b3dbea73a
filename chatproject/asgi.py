"""ASGI entry point (uvicorn): the API, the SSE streams, the admin and the browser UI."""

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")

# Static files (the browser UI's JS and CSS) are served by Django itself under STATIC_URL, so `uvicorn` alone
# runs the whole web tier; every other path goes straight to the app.
application = ASGIStaticFilesHandler(get_asgi_application())
