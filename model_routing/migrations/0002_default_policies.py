"""Every existing tier gets its default route policy (``model_routing.defaults``); later tiers get the defaults
from the selector until an admin saves one."""

from typing import Any

from django.db import migrations

from model_routing.defaults import default_policy_fields


def create_policies(apps: Any, schema_editor: Any) -> None:
    tier_model = apps.get_model("accounts", "Tier")
    policy_model = apps.get_model("model_routing", "RoutePolicy")
    for tier in tier_model.objects.all():
        policy_model.objects.get_or_create(tier=tier, defaults=default_policy_fields(tier.name))


class Migration(migrations.Migration):
    dependencies = [
        ("model_routing", "0001_initial"),
        ("accounts", "0002_seed_tiers"),
    ]

    operations = [migrations.RunPython(create_policies, migrations.RunPython.noop)]
