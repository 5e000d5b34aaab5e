"""Chip types, pools, nodes, jobs, allocations, datasets and uploaded models move from workers to fleet. State only: every table keeps its name (db_table) and its rows; nothing in the database changes. Here: the bids' and reservations' foreign keys now name fleet's models."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0001_initial'),
        ('market', '0004_spot_price_history_moves_to_billing'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='bid',
                    name='chip_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='bids', to='fleet.chiptype'),
                ),
                migrations.AlterField(
                    model_name='bid',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='bids', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='spotreservation',
                    name='chip_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.chiptype'),
                ),
                migrations.AlterField(
                    model_name='spotreservation',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='spot_reservations', to='fleet.job'),
                ),
            ],
        ),
    ]
