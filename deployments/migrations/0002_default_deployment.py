from typing import Any

from django.db import migrations

from deployments.defaults import seed_default_deployment


def seed(apps: Any, schema_editor: Any) -> None:
    seed_default_deployment(apps.get_model("deployments", "ModelDeployment"))


class Migration(migrations.Migration):
    dependencies = [("deployments", "0001_initial")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
