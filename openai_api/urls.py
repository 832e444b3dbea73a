"""The OpenAI-compatible routes (``/v1``), and which of them hold their response open.

Included by ``chatproject/urls.py`` at the root, so these paths are the whole path. :data:`STREAM_PATHS` are the
completions: they wait for their runs, so ``chatproject/asgi.py`` sends them down the stream route
(``runs.streaming.asgi``) with the run streams.
"""

from django.urls import path

from openai_api.apis import chat_completions, completions, models
from openai_api.embeddings import embeddings
from openai_api.moderations import moderations
from openai_api.responses.apis import response_detail, response_input_items, responses

urlpatterns = [
    path("v1/models", models, name="openai-models"),
    path("v1/chat/completions", chat_completions, name="openai-chat-completions"),
    path("v1/completions", completions, name="openai-completions"),
    path("v1/responses", responses, name="openai-responses"),
    path("v1/responses/<str:public_id>", response_detail, name="openai-response"),
    path("v1/responses/<str:public_id>/input_items", response_input_items, name="openai-response-input-items"),
    path("v1/embeddings", embeddings, name="openai-embeddings"),
    path("v1/moderations", moderations, name="openai-moderations"),
]

STREAM_PATHS: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
"""The long-lived responses of :data:`urlpatterns`: regular expressions of the whole request path."""
