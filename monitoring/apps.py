from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    """Health, readiness and Prometheus endpoints, and the container health checks (no tables)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "monitoring"
