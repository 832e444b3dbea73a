from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("chats", "0007_message_role_developer")]

    operations = [
        migrations.AddField(
            model_name="message",
            name="moderation",
            field=models.CharField(
                blank=True,
                choices=[("", "none"), ("refused", "Refused"), ("retracted", "Retracted")],
                default="",
                help_text="Refused (a flagged prompt) or retracted (a flagged answer): shown as such, never in a prompt.",
                max_length=16,
            ),
        ),
    ]
