import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    """Users' own Hugging Face models (UploadedModel), named by jobs as 'model:<id>'."""

    dependencies = [
        ("workers", "0011_dataset_kinds"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="UploadedModel",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=120)),
                ("architecture", models.CharField(help_text="config.json's model_type, e.g. llama", max_length=40)),
                ("parameters", models.PositiveBigIntegerField()),
                ("size_bytes", models.PositiveBigIntegerField()),
                ("config", models.JSONField()),
                ("shape", models.JSONField()),
                ("has_chat_template", models.BooleanField(default=False)),
                (
                    "directory",
                    models.CharField(
                        help_text="The model folder, relative to MEDIA_ROOT", max_length=255, unique=True
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "owner",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="uploaded_models",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["-created_at", "-id"]},
        ),
    ]
