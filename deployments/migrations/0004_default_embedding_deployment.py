from typing import Any

from django.db import migrations

from deployments.defaults import seed_default_embedding_deployment


def seed(apps: Any, schema_editor: Any) -> None:
    seed_default_embedding_deployment(apps.get_model("deployments", "ModelDeployment"))


class Migration(migrations.Migration):
    dependencies = [("deployments", "0003_deployment_kind")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
