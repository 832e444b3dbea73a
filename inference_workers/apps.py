from django.apps import AppConfig


class InferenceWorkersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "inference_workers"

    def ready(self) -> None:
        # Connects the worker lifecycle receivers, and the one that makes each worker consume its own queue.
        from inference_workers import affinity, signals  # noqa: F401
