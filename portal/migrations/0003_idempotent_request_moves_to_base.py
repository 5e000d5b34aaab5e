# IdempotentRequest moves to the base app (base/migrations/0001_initial.py takes it over). The table
# stays where it is: this only removes the model from portal's migration state.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0002_idempotent_requests'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='IdempotentRequest')],
            database_operations=[],
        ),
    ]
