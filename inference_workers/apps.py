from django.apps import AppConfig


class InferenceWorkersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "inference_workers"

    def ready(self) -> None:
        from inference_workers import signals  # noqa: F401 - connects the worker lifecycle receivers
