"""ASGI entry point (uvicorn): the API, the SSE streams, the admin and the browser UI."""

import gc
import os

import django
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")

django.setup(set_prefix=False)  # what get_asgi_application() does, before building the handler

# Imported after setup (the apps need Django's registry).
from core.asgi_body import WholeBodyASGIHandler  # noqa: E402
from core.asgi_lifespan import with_lifespan  # noqa: E402
from deployments.readiness import web_startup  # noqa: E402
from moderation.startup import moderation_startup  # noqa: E402
from openai_api.urls import STREAM_PATHS as OPENAI_STREAM_PATHS  # noqa: E402
from runs.streaming.asgi import RUN_STREAM_PATH, with_stream_route  # noqa: E402
from runs.streaming.drain import drain_on_signals  # noqa: E402

# Static files (the browser UI's JS and CSS) are served by Django itself under STATIC_URL, so `uvicorn` alone
# runs the whole web tier; every other path goes straight to the app. The handler reads a chunked body like a
# declared one (core/asgi_body.py).
_django = ASGIStaticFilesHandler(WholeBodyASGIHandler())

# The long-lived responses (the run streams, and the OpenAI-compatible completions, which wait for their runs)
# skip Django's per-request thread (see runs/streaming/asgi.py). At lifespan startup, before the first
# connection is accepted: SIGTERM will end the run streams with `reconnect` (runs/streaming/drain.py), the
# model's tokenizer, which prompts are counted with, is loaded, and so is the moderation classifier.
_routed = with_stream_route(_django, paths=(RUN_STREAM_PATH, *OPENAI_STREAM_PATHS))
application = with_lifespan(_routed, startup=[drain_on_signals, web_startup, moderation_startup])

# Thousands of open streams keep hundreds of thousands of objects alive; a full collection over them
# (and over everything imported above) stalled the event loop for ~300 ms every few seconds under load.
# Objects that exist now live as long as the process: keep the collector off them, and collect less often.
gc.collect()
gc.freeze()
gc.set_threshold(10_000, 20, 20)
