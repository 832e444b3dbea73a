"""Every tier that exists now gets a moderation policy with the model's defaults (input checked, output retracted,
a 16-token window), so the admin lists one per tier to edit. Tiers made later read the same defaults until an
admin saves a row for them (``moderation.selectors.moderation_policy``)."""

from django.db import migrations


def create_policies(apps, schema_editor):
    Tier = apps.get_model("accounts", "Tier")
    ModerationPolicy = apps.get_model("moderation", "ModerationPolicy")
    for tier in Tier.objects.filter(moderation_policy__isnull=True):
        ModerationPolicy.objects.create(tier=tier)


class Migration(migrations.Migration):
    dependencies = [("moderation", "0001_initial"), ("accounts", "0002_seed_tiers")]
    operations = [migrations.RunPython(create_policies, migrations.RunPython.noop)]
