from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    """The served models: their materialized copies on local disk and their tokenizers (no tables yet)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "deployments"
