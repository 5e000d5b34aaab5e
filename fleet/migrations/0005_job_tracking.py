from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0004_job_epochs_and_continuations'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='tracking',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
