from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from accounts.apis import TokenApi
from chats.apis import ChatListCreateApi
from deployments.apis import ModelListApi
from monitoring.health import healthz, readyz
from monitoring.prometheus import metrics
from runs.apis import ChatDetailApi, ChatMessagesApi, RunCancelApi, RunDetailApi
from runs.streaming.views import run_stream

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics, name="metrics"),
    path("api/auth/token", TokenApi.as_view(), name="auth-token"),
    path("api/chats", ChatListCreateApi.as_view(), name="chat-list"),
    path("api/chats/<int:chat_id>", ChatDetailApi.as_view(), name="chat-detail"),
    path("api/chats/<int:chat_id>/messages", ChatMessagesApi.as_view(), name="chat-messages"),
    path("api/models", ModelListApi.as_view(), name="model-list"),
    path("api/runs/<int:run_id>", RunDetailApi.as_view(), name="run-detail"),
    path("api/runs/<int:run_id>/cancel", RunCancelApi.as_view(), name="run-cancel"),
    path("api/runs/<int:run_id>/stream", run_stream, name="run-stream"),
    path("", include("openai_api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("", include("web.urls")),
]

handler400 = "core.errors.bad_request"
handler404 = "core.errors.page_not_found"
handler500 = "core.errors.server_error"
