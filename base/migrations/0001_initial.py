# IdempotentRequest, made by portal/migrations/0002_idempotent_requests.py, now belongs to this app. The
# table, its constraint and its indexes keep their names: this only adds the model to base's migration
# state (after portal's state lets go of it) and renames its content type, so its permissions follow it.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def adopt_content_type(apps, schema_editor):
    ContentType = apps.get_model('contenttypes', 'ContentType')
    db = schema_editor.connection.alias
    ContentType.objects.using(db).filter(app_label='portal', model='idempotentrequest').update(app_label='base')


def return_content_type(apps, schema_editor):
    ContentType = apps.get_model('contenttypes', 'ContentType')
    db = schema_editor.connection.alias
    ContentType.objects.using(db).filter(app_label='base', model='idempotentrequest').update(app_label='portal')


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('portal', '0003_idempotent_request_moves_to_base'),
        ('contenttypes', '0002_remove_content_type_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='IdempotentRequest',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('key', models.CharField(max_length=255)),
                        ('method', models.CharField(max_length=8)),
                        ('path', models.CharField(max_length=500)),
                        ('body_hash', models.CharField(help_text='SHA-256 of the method, path and canonical body.', max_length=64)),
                        ('status_code', models.PositiveSmallIntegerField()),
                        ('response_body', models.TextField(blank=True, help_text="The answer's JSON as it was sent.")),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='idempotent_requests', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'portal_idempotentrequest',
                        'constraints': [models.UniqueConstraint(fields=('user', 'key'), name='idempotent_request_user_key')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(adopt_content_type, return_content_type),
    ]
