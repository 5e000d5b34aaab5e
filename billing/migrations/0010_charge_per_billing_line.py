"""The meter writes one Charge row per billing line per tick, not one per allocation.

A billing line is one job's allocations of one chip type and mode. At 100,000 open allocations a
tick wrote 100,000 Charge rows, each checked against its allocation; grouped per line and paying
transaction it writes a few thousand.

- `allocation` may be empty: the meter's rows name none. Rows written before keep theirs.
- `chip_seconds` holds what a row charged for (each allocation's chips × its seconds); a line row's
  `chips × seconds` would not say it. Older rows get `chips × seconds`, which was exactly that. The
  append-only trigger (0004) is switched off for that one UPDATE, inside this migration's transaction.
- `chips` widens to an integer: a line's chips are the sum of its allocations'.
- The (allocation, ended_at) index goes: nothing reads charges by allocation any more.
- The statement-level check (0006) now checks a row that names no allocation against its job's
  owner and its chip type, and one that names an allocation as before; every row must be paid by a
  CHARGE transaction.
"""

import django.db.models.deletion
from django.db import migrations, models

# Deferred checks run at once here: PostgreSQL refuses to ALTER a table with trigger events pending.
BACKFILL = r"""
SET CONSTRAINTS ALL IMMEDIATE;
ALTER TABLE billing_charge DISABLE TRIGGER billing_charge_append_only;
UPDATE billing_charge SET chip_seconds = chips::bigint * seconds;
ALTER TABLE billing_charge ENABLE TRIGGER billing_charge_append_only;
SET CONSTRAINTS ALL DEFERRED;
"""

CHECK_LINES = r"""
CREATE OR REPLACE FUNCTION billing_charges_match_allocations() RETURNS trigger AS $$
DECLARE
    bad record;
BEGIN
    SELECT c.id, c.job_id, c.allocation_id INTO bad
      FROM inserted c
      LEFT JOIN workers_job j ON j.id = c.job_id
      LEFT JOIN workers_chiptype ct ON ct.id = c.chip_type_id
      LEFT JOIN workers_allocation a ON a.id = c.allocation_id
      LEFT JOIN billing_transaction t ON t.id = c.transaction_id
     WHERE j.id IS NULL OR ct.id IS NULL
        OR j.owner_id IS DISTINCT FROM c.owner_id
        OR (c.allocation_id IS NOT NULL
            AND (a.id IS NULL OR (c.job_id, c.chip_type_id, c.mode, c.chips)
                                 IS DISTINCT FROM (a.job_id, a.chip_type_id, a.mode, a.chips)))
        OR t.kind IS DISTINCT FROM 'charge'
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'charge % does not match job % (allocation %): the owner must be the job''s, the chip '
            'type must exist, a named allocation must be of that job, chip type, mode and chips, and a CHARGE '
            'transaction must pay it', bad.id, bad.job_id, bad.allocation_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
"""

CHECK_ALLOCATIONS = r"""
CREATE OR REPLACE FUNCTION billing_charges_match_allocations() RETURNS trigger AS $$
DECLARE
    bad record;
BEGIN
    SELECT c.id, c.allocation_id INTO bad
      FROM inserted c
      LEFT JOIN workers_allocation a ON a.id = c.allocation_id
      LEFT JOIN workers_job j ON j.id = a.job_id
      LEFT JOIN billing_transaction t ON t.id = c.transaction_id
     WHERE j.id IS NULL
        OR (c.job_id, c.owner_id, c.chip_type_id, c.mode, c.chips)
           IS DISTINCT FROM (a.job_id, j.owner_id, a.chip_type_id, a.mode, a.chips)
        OR t.kind IS DISTINCT FROM 'charge'
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'charge % does not match allocation %: its job, owner, chip type, mode and chips '
            'must be the allocation''s, and a CHARGE transaction must pay it', bad.id, bad.allocation_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0009_notification_settings"),
        ("workers", "0016_node_throughput"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="charge", name="billing_cha_allocat_a34bcc_idx"),
        migrations.AlterField(
            model_name="charge",
            name="allocation",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="charges",
                to="workers.allocation",
            ),
        ),
        migrations.AlterField(
            model_name="charge",
            name="chips",
            field=models.PositiveIntegerField(help_text="Chips of the line's allocations this row charges for."),
        ),
        migrations.AddField(
            model_name="charge",
            name="chip_seconds",
            field=models.BigIntegerField(
                default=0, help_text="Chip-seconds charged for: each allocation's chips × its seconds."
            ),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="charge",
            name="started_at",
            field=models.DateTimeField(help_text="The earliest second the row charges for."),
        ),
        migrations.AlterField(
            model_name="charge",
            name="ended_at",
            field=models.DateTimeField(help_text="Just after the latest second the row charges for."),
        ),
        migrations.AlterField(
            model_name="charge",
            name="seconds",
            field=models.PositiveIntegerField(
                help_text="Wall-clock seconds covered: the longest of the line's allocations."
            ),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.RunSQL(CHECK_LINES, CHECK_ALLOCATIONS),
    ]
