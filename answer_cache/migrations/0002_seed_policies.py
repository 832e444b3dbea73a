"""Every existing tier gets its cache policy with the defaults (private scope only; a shared scope is an admin's
opt-in). A tier made later has no row until an admin saves one: ``selectors.cache_policy_for`` gives it the same
defaults."""

from django.db import migrations


def seed(apps, schema_editor):
    Tier = apps.get_model("accounts", "Tier")
    CachePolicy = apps.get_model("answer_cache", "CachePolicy")
    for tier in Tier.objects.all():
        CachePolicy.objects.get_or_create(tier=tier)


def unseed(apps, schema_editor):
    apps.get_model("answer_cache", "CachePolicy").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("answer_cache", "0001_initial"), ("accounts", "0002_seed_tiers")]
    operations = [migrations.RunPython(seed, unseed)]
