from django.apps import AppConfig


class ModelRoutingConfig(AppConfig):
    """``model: "auto"``: the per-tier route policies (admin-editable) and the router that applies them."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "model_routing"
    verbose_name = "Model routing"
