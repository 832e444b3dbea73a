"""The OpenAI-compatible routes (``/v1``), and which of them hold their response open.

Included by ``chatproject/urls.py`` at the root, so these paths are the whole path. :data:`STREAM_PATHS` are the
completions: they wait for their runs, so ``chatproject/asgi.py`` sends them down the stream route
(``runs.streaming.asgi``) with the run streams.
"""

from django.urls import path

from openai_api.apis import chat_completions, completions, models
from openai_api.embeddings import embeddings

urlpatterns = [
    path("v1/models", models, name="openai-models"),
    path("v1/chat/completions", chat_completions, name="openai-chat-completions"),
    path("v1/completions", completions, name="openai-completions"),
    path("v1/embeddings", embeddings, name="openai-embeddings"),
]

STREAM_PATHS: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions")
"""The long-lived responses of :data:`urlpatterns`: regular expressions of the whole request path."""
