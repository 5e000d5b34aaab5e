"""Chip types, pools, nodes, jobs, allocations, datasets and uploaded models move from workers to fleet. State only: every table keeps its name (db_table) and its rows; nothing in the database changes. Here: the prices', lines' and charges' foreign keys now name fleet's models."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0012_telemetry_retention'),
        ('fleet', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='billingline',
                    name='chip_type',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.chiptype'),
                ),
                migrations.AlterField(
                    model_name='billingline',
                    name='job',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='billing_lines', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='charge',
                    name='allocation',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='charges', to='fleet.allocation'),
                ),
                migrations.AlterField(
                    model_name='charge',
                    name='chip_type',
                    field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.chiptype'),
                ),
                migrations.AlterField(
                    model_name='charge',
                    name='job',
                    field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='charges', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='price',
                    name='chip_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='prices', to='fleet.chiptype'),
                ),
                migrations.AlterField(
                    model_name='spotprice',
                    name='chip_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='spot_prices', to='fleet.chiptype'),
                ),
            ],
        ),
    ]
