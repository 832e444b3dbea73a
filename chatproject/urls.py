from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from accounts.apis import TokenApi
from chats.apis import ChatExportApi, ChatListCreateApi, ChatSearchApi
from deployments.apis import ModelListApi
from feedback.apis import RunFeedbackApi
from memory.apis import MemoryDetailApi, MemoryListApi, MemoryStateApi
from monitoring.health import healthz, readyz
from monitoring.prometheus import metrics
from runs.apis import (
    ChatContinueApi,
    ChatDetailApi,
    ChatMessagesApi,
    ChatRegenerateApi,
    RunCancelApi,
    RunDetailApi,
    UsageApi,
)
from runs.streaming.views import run_stream

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics, name="metrics"),
    path("api/auth/token", TokenApi.as_view(), name="auth-token"),
    path("api/chats", ChatListCreateApi.as_view(), name="chat-list"),
    path("api/chats/<int:chat_id>", ChatDetailApi.as_view(), name="chat-detail"),
    path("api/chats/search", ChatSearchApi.as_view(), name="chat-search"),
    path("api/chats/<int:chat_id>/messages", ChatMessagesApi.as_view(), name="chat-messages"),
    path("api/chats/<int:chat_id>/regenerate", ChatRegenerateApi.as_view(), name="chat-regenerate"),
    path("api/chats/<int:chat_id>/continue", ChatContinueApi.as_view(), name="chat-continue"),
    path("api/chats/<int:chat_id>/export", ChatExportApi.as_view(), name="chat-export"),
    path("api/models", ModelListApi.as_view(), name="model-list"),
    path("api/memory", MemoryStateApi.as_view(), name="memory-state"),
    path("api/memories", MemoryListApi.as_view(), name="memory-list"),
    path("api/memories/<int:memory_id>", MemoryDetailApi.as_view(), name="memory-detail"),
    path("api/runs/<int:run_id>", RunDetailApi.as_view(), name="run-detail"),
    path("api/runs/<int:run_id>/cancel", RunCancelApi.as_view(), name="run-cancel"),
    path("api/runs/<int:run_id>/feedback", RunFeedbackApi.as_view(), name="run-feedback"),
    path("api/usage", UsageApi.as_view(), name="usage"),
    path("api/runs/<int:run_id>/stream", run_stream, name="run-stream"),
    path("", include("openai_api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("", include("web.urls")),
]

handler400 = "core.errors.bad_request"
handler404 = "core.errors.page_not_found"
handler500 = "core.errors.server_error"
