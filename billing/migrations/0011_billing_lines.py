"""Billing lines: the meter bills one job's allocations of one chip type and mode as one.

An open allocation's billing lives on its line (the mark, what was paid, the chip-seconds billed);
its own `billed_through` and `charged_total` are written once, when it ends and the meter folds it
into the line. A tick then reads the open allocations but writes only the lines.

- A statement trigger on the allocation table makes the line of every new allocation (its
  `billed_through` starts at the earliest start), so no code path can make an allocation without one.
- Existing allocations are grouped into lines: a line's `charged_total` and `chip_seconds` are its
  allocations' (paid, and chips × billed whole seconds), its mark the latest of theirs. Those that
  ended and were billed through their last whole second are settled: their totals also go to
  `settled_owed` / `settled_chip_seconds`. The others are priced from their start by the next tick,
  as every open allocation is, and what they were charged already counts against that.
"""

import django.db.models.deletion
from django.db import migrations, models


LINES = r"""
CREATE FUNCTION billing_lines_for_allocations() RETURNS trigger AS $$
BEGIN
    INSERT INTO billing_billingline (job_id, chip_type_id, mode, billed_through, charged_total, chip_seconds,
                                     settled_owed, settled_chip_seconds)
    SELECT job_id, chip_type_id, mode, min(started_at), 0, 0, 0, 0 FROM inserted GROUP BY job_id, chip_type_id, mode
        ON CONFLICT (job_id, chip_type_id, mode) DO NOTHING;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER billing_lines_for_allocations AFTER INSERT ON workers_allocation
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION billing_lines_for_allocations();

INSERT INTO billing_billingline (job_id, chip_type_id, mode, billed_through, charged_total, chip_seconds,
                                 settled_owed, settled_chip_seconds)
SELECT job_id, chip_type_id, mode, max(billed_through), sum(charged_total), sum(chip_seconds),
       coalesce(sum(charged_total) FILTER (WHERE settled), 0), coalesce(sum(chip_seconds) FILTER (WHERE settled), 0)
  FROM (SELECT job_id, chip_type_id, mode, billed_through, charged_total,
               chips * floor(extract(epoch FROM billed_through - started_at))::bigint AS chip_seconds,
               ended_at IS NOT NULL AND billed_through > ended_at - interval '1 second' AS settled
          FROM workers_allocation) a
 GROUP BY job_id, chip_type_id, mode;
"""

NO_LINES = r"""
DROP TRIGGER billing_lines_for_allocations ON workers_allocation;
DROP FUNCTION billing_lines_for_allocations();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0010_charge_per_billing_line'),
        ('workers', '0016_node_throughput'),
    ]

    operations = [
        migrations.CreateModel(
            name='BillingLine',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('mode', models.CharField(max_length=12)),
                ('billed_through', models.DateTimeField(help_text='When the meter last billed the line (or its first start).')),
                ('charged_total', models.BigIntegerField(default=0, help_text="What the line's wallet paid, in micro-units.")),
                ('chip_seconds', models.BigIntegerField(default=0, help_text='Chip-seconds billed, ended allocations included.')),
                ('settled_owed', models.BigIntegerField(default=0, help_text="What the line's folded-in (ended) allocations cost.")),
                ('settled_chip_seconds', models.BigIntegerField(default=0, help_text='Their chip-seconds.')),
                ('chip_type', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='workers.chiptype')),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='billing_lines', to='workers.job')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('job', 'chip_type', 'mode'), name='one_billing_line_per_kind'), models.CheckConstraint(condition=models.Q(('charged_total__gte', 0)), name='billing_line_charged_not_negative')],
            },
        ),
        migrations.RunSQL(LINES, NO_LINES),
    ]
