from django.apps import AppConfig


class InferenceWorkersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "inference_workers"
