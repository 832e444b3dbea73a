from django.apps import AppConfig


class AnswerCacheConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "answer_cache"
    verbose_name = "Answer cache"
