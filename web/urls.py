from django.urls import path

from web import views
from web.apis import MeApi

urlpatterns = [
    path("", views.chat_page, name="chat-home"),
    path("c/<int:chat_id>", views.chat_page, name="chat-page"),
    path("usage/", views.usage_page, name="usage"),
    path("login/", views.UiLoginView.as_view(), name="login"),
    path("logout/", views.UiLogoutView.as_view(), name="logout"),
    path("api/me", MeApi.as_view(), name="me"),
]
