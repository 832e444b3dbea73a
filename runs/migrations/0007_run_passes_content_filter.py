from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_run_prompt_cache_key_continue_mode")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="passes",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="What each pass around the run decided, in order (runs.passes): routing, moderation, the "
                "cache; each with its decision, its cost in ms and its scores.",
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="finish_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("stop", "Stop"),
                    ("length", "Length"),
                    ("cancelled", "Cancelled"),
                    ("error", "Error"),
                    ("content_filter", "Content Filter"),
                ],
                default="",
                max_length=16,
            ),
        ),
    ]
