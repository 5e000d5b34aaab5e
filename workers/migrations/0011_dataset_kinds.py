from django.db import migrations, models


class Migration(migrations.Migration):
    """Chat and prompt/completion datasets; "completion" needs a longer kind column."""

    dependencies = [
        ("workers", "0010_job_plan_is_typed"),
    ]

    operations = [
        migrations.AlterField(
            model_name="dataset",
            name="kind",
            field=models.CharField(
                choices=[
                    ("text", "Plain text"),
                    ("jsonl", "JSON lines"),
                    ("chat", "Chat"),
                    ("completion", "Prompt and completion"),
                ],
                max_length=16,
            ),
        ),
    ]
