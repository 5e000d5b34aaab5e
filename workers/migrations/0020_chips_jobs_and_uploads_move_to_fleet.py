"""Chip types, pools, nodes, jobs, allocations, datasets and uploaded models move from workers to fleet. State only: every table keeps its name (db_table) and its rows; nothing in the database changes. Here: the control app's foreign keys name fleet's models, and the moved models leave workers' state."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0013_fleet_owns_chips_and_jobs'),
        ('fleet', '0001_initial'),
        ('market', '0005_fleet_owns_chips_and_jobs'),
        ('workers', '0019_migration_finished_before_moving'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='measuredthroughput',
                    name='chip_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='fleet.chiptype'),
                ),
                migrations.RemoveField(
                    model_name='pool',
                    name='chip_type',
                ),
                migrations.RemoveField(
                    model_name='dataset',
                    name='owner',
                ),
                migrations.RemoveField(
                    model_name='job',
                    name='dataset_upload',
                ),
                migrations.RemoveField(
                    model_name='job',
                    name='eval_dataset_upload',
                ),
                migrations.RemoveField(
                    model_name='job',
                    name='owner',
                ),
                migrations.AlterField(
                    model_name='agentcommand',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='commands', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='jobcheckpoint',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='joblogline',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='log_lines', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='jobevent',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='events', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='jobmigration',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='migrations', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='jobmetric',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='metrics', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='rankexit',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='rank_exits', to='fleet.job'),
                ),
                migrations.AlterField(
                    model_name='jobeval',
                    name='job',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='evals', to='fleet.job'),
                ),
                migrations.RemoveField(
                    model_name='node',
                    name='pool',
                ),
                migrations.AlterField(
                    model_name='nodethroughput',
                    name='node',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='measured', to='fleet.node'),
                ),
                migrations.AlterField(
                    model_name='agentcommand',
                    name='node',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='commands', to='fleet.node'),
                ),
                migrations.AlterField(
                    model_name='enrollmenttoken',
                    name='pool',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='enrollment_tokens', to='fleet.pool'),
                ),
                migrations.RemoveField(
                    model_name='uploadedmodel',
                    name='owner',
                ),
                migrations.DeleteModel(
                    name='Allocation',
                ),
                migrations.DeleteModel(
                    name='ChipType',
                ),
                migrations.DeleteModel(
                    name='Dataset',
                ),
                migrations.DeleteModel(
                    name='Job',
                ),
                migrations.DeleteModel(
                    name='Node',
                ),
                migrations.DeleteModel(
                    name='Pool',
                ),
                migrations.DeleteModel(
                    name='UploadedModel',
                ),
            ],
        ),
    ]
