"""Chip types, pools, nodes, jobs, allocations, datasets and uploaded models move from workers to fleet. State only: every table keeps its name (db_table) and its rows; nothing in the database changes. Here: fleet takes them over at their old tables; their content types (and so their permissions) and the audit log's labels follow."""

import django.core.validators
import django.db.models.deletion
import fleet.fields
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models

MOVED = ["chiptype", "pool", "node", "job", "allocation", "dataset", "uploadedmodel"]


def relabel(apps, schema_editor, old="workers", new="fleet"):
    """The moved models' content types (their permissions hang on them) and audit labels name fleet."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label=old, model__in=MOVED).update(app_label=new)
    AuditEntry = apps.get_model("base", "AuditEntry")
    for model in MOVED:
        AuditEntry.objects.filter(target_type=f"{old}.{model}").update(target_type=f"{new}.{model}")


def unlabel(apps, schema_editor):
    relabel(apps, schema_editor, old="fleet", new="workers")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('base', '0003_alter_auditentry_target_type'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('workers', '0019_migration_finished_before_moving'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Node',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('hostname', models.CharField(max_length=120, unique=True)),
                        ('chips', models.PositiveSmallIntegerField(validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(64)])),
                        ('agent_status', models.CharField(choices=[('unenrolled', 'Not enrolled'), ('online', 'Online'), ('draining', 'Draining'), ('offline', 'Offline'), ('lost', 'Lost')], default='unenrolled', max_length=16)),
                        ('last_heartbeat_at', models.DateTimeField(blank=True, null=True)),
                        ('simulated', models.BooleanField(default=False, help_text="Runs real training on a CPU, paced to this chip type's speed.")),
                        ('spot_eligible', models.BooleanField(default=False)),
                        ('token_hash', models.CharField(blank=True, editable=False, max_length=64, null=True, unique=True)),
                        ('approved_chips', models.PositiveSmallIntegerField(default=1, help_text="The most chips this host's agent may declare (from its enrollment token; operators may change it).", validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(64)])),
                        ('address', models.CharField(blank=True, help_text="Where this node's ranks can be reached.", max_length=120)),
                        ('address_observed', models.BooleanField(default=False, help_text="The address is the one the platform sees the agent's requests come from (its agent declared none); it follows the agent when that changes.")),
                        ('devices', models.JSONField(blank=True, default=list)),
                        ('health', models.JSONField(blank=True, default=dict)),
                        ('agent_version', models.CharField(blank=True, max_length=40)),
                        ('enrolled_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'db_table': 'workers_node',
                        'ordering': ['pool', 'hostname'],
                    },
                ),
                migrations.CreateModel(
                    name='ChipType',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('slug', models.SlugField(max_length=40, unique=True)),
                        ('name', models.CharField(max_length=80)),
                        ('vendor', models.CharField(max_length=40)),
                        ('family', models.CharField(choices=[('gpu', 'GPU'), ('tpu', 'TPU'), ('npu', 'NPU')], max_length=8)),
                        ('memory_gib', models.PositiveIntegerField()),
                        ('bf16_tflops', models.DecimalField(decimal_places=1, max_digits=8, validators=[django.core.validators.MinValueValidator(Decimal('0.1'))])),
                        ('memory_bandwidth_gbps', models.PositiveIntegerField(help_text='GB/s')),
                        ('software_stack', models.CharField(choices=[('cuda', 'CUDA'), ('xla', 'XLA'), ('cann', 'CANN'), ('bang', 'BANG')], max_length=8)),
                        ('default_mfu', models.DecimalField(decimal_places=3, help_text='Model FLOPs utilisation assumed before the platform has measured this chip.', max_digits=4, validators=[django.core.validators.MinValueValidator(Decimal('0.01')), django.core.validators.MaxValueValidator(Decimal('1'))])),
                        ('sort_order', models.PositiveSmallIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'workers_chiptype',
                        'ordering': ['sort_order', 'slug'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('bf16_tflops__gt', 0)), name='chip_tflops_positive'), models.CheckConstraint(condition=models.Q(('default_mfu__gt', 0), ('default_mfu__lte', 1)), name='chip_mfu_in_range')],
                    },
                ),
                migrations.CreateModel(
                    name='Dataset',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=120)),
                        ('kind', models.CharField(choices=[('text', 'Plain text'), ('jsonl', 'JSON lines'), ('chat', 'Chat'), ('completion', 'Prompt and completion')], max_length=16)),
                        ('store_prefix', models.CharField(help_text="The dataset's tree in object storage", max_length=255, unique=True)),
                        ('file_name', models.CharField(help_text='The file in the tree: data.txt or data.jsonl', max_length=40)),
                        ('sha256', models.CharField(max_length=64)),
                        ('size_bytes', models.PositiveBigIntegerField()),
                        ('samples', models.PositiveIntegerField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='datasets', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'workers_dataset',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='Job',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(blank=True, max_length=120)),
                        ('model_name', models.CharField(max_length=200)),
                        ('dataset', models.CharField(default='synthetic', max_length=120)),
                        ('per_device_batch_size', models.PositiveIntegerField()),
                        ('max_steps', models.PositiveIntegerField()),
                        ('policy', models.CharField(choices=[('cost-performance', 'Cost-performance'), ('fastest', 'Fastest'), ('cheapest', 'Cheapest'), ('single-type', 'Single chip type')], default='cost-performance', max_length=20)),
                        ('max_budget_per_hour', models.BigIntegerField(help_text='micro-units per hour')),
                        ('total_budget', models.BigIntegerField(blank=True, help_text='micro-units', null=True)),
                        ('chip_counts', models.JSONField(blank=True, help_text='Chips picked by hand: {slug: count}', null=True)),
                        ('spot', models.BooleanField(default=False)),
                        ('spot_bid_per_hour', models.BigIntegerField(blank=True, help_text='micro-units per chip-hour', null=True)),
                        ('allow_on_demand', models.BooleanField(default=True)),
                        ('allow_other_chips', models.BooleanField(default=True)),
                        ('seq_len', models.PositiveIntegerField(blank=True, help_text="Tokens per sample; empty: the model's", null=True)),
                        ('mode', models.CharField(choices=[('full', 'Full fine-tuning'), ('lora', 'LoRA adapter')], default='full', max_length=8)),
                        ('lora', models.JSONField(blank=True, null=True)),
                        ('gradient_checkpointing', models.BooleanField(default=False)),
                        ('model_spec', models.JSONField(blank=True, editable=False, null=True)),
                        ('eval_fraction', models.FloatField(default=0)),
                        ('eval_every', models.PositiveIntegerField(default=0)),
                        ('waiting_for', models.JSONField(blank=True, null=True)),
                        ('credit_hold', models.BigIntegerField(default=0, help_text='micro-units')),
                        ('next_plan_at', models.DateTimeField(blank=True, null=True)),
                        ('plan_attempts', models.PositiveSmallIntegerField(default=0)),
                        ('status', models.CharField(choices=[('queued', 'Queued'), ('planning', 'Planning'), ('provisioning', 'Provisioning'), ('running', 'Running'), ('migrating', 'Migrating'), ('stopping', 'Stopping'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled'), ('stopped_no_credit', 'Stopped: out of credit')], db_index=True, default='queued', max_length=20)),
                        ('status_reason', models.TextField(blank=True)),
                        ('epoch', models.PositiveIntegerField(default=0)),
                        ('plan', fleet.fields.PlanField(blank=True, null=True)),
                        ('quote', fleet.fields.PlanField(blank=True, editable=False, null=True)),
                        ('step', models.PositiveIntegerField(default=0)),
                        ('tokens', models.PositiveBigIntegerField(default=0)),
                        ('loss', models.FloatField(blank=True, null=True)),
                        ('first_loss', models.FloatField(blank=True, null=True)),
                        ('eval_loss', models.FloatField(blank=True, null=True)),
                        ('tokens_per_s', models.FloatField(blank=True, null=True)),
                        ('latest_checkpoint', models.CharField(blank=True, max_length=500)),
                        ('latest_checkpoint_step', models.PositiveIntegerField(blank=True, null=True)),
                        ('latest_checkpoint_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('cancel_requested_at', models.DateTimeField(blank=True, null=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('dataset_upload', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='fleet.dataset')),
                        ('eval_dataset_upload', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='eval_jobs', to='fleet.dataset')),
                        ('owner', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'workers_job',
                        'ordering': ['-created_at', '-id'],
                    },
                ),
                migrations.CreateModel(
                    name='Allocation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('chips', models.PositiveSmallIntegerField()),
                        ('mode', models.CharField(choices=[('on_demand', 'On-demand'), ('spot', 'Spot')], default='on_demand', max_length=12)),
                        ('epoch', models.PositiveIntegerField()),
                        ('started_at', models.DateTimeField()),
                        ('ended_at', models.DateTimeField(blank=True, null=True)),
                        ('billed_through', models.DateTimeField()),
                        ('charged_total', models.BigIntegerField(default=0)),
                        ('held_until', models.DateTimeField(blank=True, null=True)),
                        ('chip_type', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.chiptype')),
                        ('job', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='allocations', to='fleet.job')),
                        ('node', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='allocations', to='fleet.node')),
                    ],
                    options={
                        'db_table': 'workers_allocation',
                        'ordering': ['started_at', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='Pool',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('zone', models.CharField(max_length=40)),
                        ('name', models.SlugField(max_length=80, unique=True)),
                        ('chip_type', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='pools', to='fleet.chiptype')),
                    ],
                    options={
                        'db_table': 'workers_pool',
                        'ordering': ['chip_type__sort_order', 'zone'],
                    },
                ),
                migrations.AddField(
                    model_name='node',
                    name='pool',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='nodes', to='fleet.pool'),
                ),
                migrations.CreateModel(
                    name='UploadedModel',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=120)),
                        ('architecture', models.CharField(help_text="config.json's model_type, e.g. llama", max_length=40)),
                        ('parameters', models.PositiveBigIntegerField()),
                        ('size_bytes', models.PositiveBigIntegerField()),
                        ('config', models.JSONField()),
                        ('shape', models.JSONField()),
                        ('has_chat_template', models.BooleanField(default=False)),
                        ('store_prefix', models.CharField(help_text="The model's tree in object storage", max_length=255, unique=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='uploaded_models', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'workers_uploadedmodel',
                        'ordering': ['-created_at', '-id'],
                    },
                ),
                migrations.AddIndex(
                    model_name='job',
                    index=models.Index(fields=['status', 'next_plan_at'], name='job_planning_queue'),
                ),
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.CheckConstraint(condition=models.Q(('max_budget_per_hour__gt', 0)), name='job_budget_positive'),
                ),
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.CheckConstraint(condition=models.Q(('max_steps__gt', 0)), name='job_steps_positive'),
                ),
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.CheckConstraint(condition=models.Q(('per_device_batch_size__gt', 0)), name='job_batch_positive'),
                ),
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.CheckConstraint(condition=models.Q(('credit_hold__gte', 0)), name='job_credit_hold_not_negative'),
                ),
                migrations.AddIndex(
                    model_name='allocation',
                    index=models.Index(condition=models.Q(('ended_at__isnull', True)), fields=['node'], name='open_allocations_by_node'),
                ),
                migrations.AddConstraint(
                    model_name='allocation',
                    constraint=models.CheckConstraint(condition=models.Q(('chips__gte', 1)), name='allocation_has_chips'),
                ),
                migrations.AddConstraint(
                    model_name='allocation',
                    constraint=models.CheckConstraint(condition=models.Q(('ended_at__isnull', True), ('ended_at__gte', models.F('started_at')), _connector='OR'), name='allocation_ends_after_start'),
                ),
                migrations.AddConstraint(
                    model_name='pool',
                    constraint=models.UniqueConstraint(fields=('chip_type', 'zone'), name='one_pool_per_chip_and_zone'),
                ),
                migrations.AddConstraint(
                    model_name='node',
                    constraint=models.CheckConstraint(condition=models.Q(('chips__gte', 1)), name='node_has_chips'),
                ),
            ],
        ),
        migrations.RunPython(relabel, unlabel, elidable=False),
    ]
