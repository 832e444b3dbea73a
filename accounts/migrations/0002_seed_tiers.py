from django.db import migrations

from accounts.tier_defaults import DEFAULT_TIERS, seed_default_tiers


def seed(apps, schema_editor):
    seed_default_tiers(apps.get_model("accounts", "Tier"))


def unseed(apps, schema_editor):
    apps.get_model("accounts", "Tier").objects.filter(name__in=[t["name"] for t in DEFAULT_TIERS]).delete()


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
