from django.apps import AppConfig


class WebConfig(AppConfig):
    """The browser chat UI: login/logout, the chat page and the small API it needs (``/api/me``)."""

    name = "web"
    verbose_name = "Browser UI"
