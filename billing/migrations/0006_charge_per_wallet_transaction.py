"""A meter tick writes one ledger transaction per wallet, and far fewer per-row checks.

- Charge.transaction becomes a foreign key: one CHARGE transaction pays all of a wallet's
  charges of a tick (before: one transaction per charge).
- Job, owner and chip type on a charge are copies of its allocation's, and the transaction that
  paid it is append-only. Their per-row foreign key checks (four per charge, at commit) give way
  to one statement-level check that every inserted charge matches its allocation (job, owner,
  chip type, mode, chips) and is paid by an existing CHARGE transaction, which is stricter.
  Deleting what a charge names is still refused by the database: the charge's allocation stays a
  real foreign key, and so are the allocation's job and chip type and the job's owner;
  transactions are never deleted (0002). Charges are append-only (0004), so the insert is the only
  moment these columns are set.
- The single-column indexes on allocation, owner and chip type go: (allocation, ended_at) and
  (owner, ended_at) cover the first two, nothing looks charges up by chip type alone.
- The balance rule of 0005 is checked on the legs each INSERT adds: per transaction they sum to
  zero in one currency, the currency of any legs the transaction already had. By induction every
  transaction still sums to zero in one currency, and the check no longer reads a transaction's
  older legs (its plan, cached while billing_entry was small, scanned every entry).
- "A transaction has entries" is still checked at commit for every new transaction, but its
  lookup always uses the entry index: a plan cached while billing_entry looked small scanned the
  whole table once per new transaction (0.4 s at the commit of a 10,000-allocation tick).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

FORWARD = r"""
CREATE FUNCTION billing_charges_match_allocations() RETURNS trigger AS $$
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

CREATE TRIGGER billing_charges_match_allocations AFTER INSERT ON billing_charge
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION billing_charges_match_allocations();

CREATE OR REPLACE FUNCTION billing_entries_balanced() RETURNS trigger AS $$
DECLARE
    bad record;
BEGIN
    SELECT s.transaction_id, s.total, s.currencies INTO bad
      FROM (SELECT i.transaction_id, sum(i.amount) AS total, count(DISTINCT a.currency) AS currencies,
                   min(a.currency) AS currency
              FROM inserted i JOIN billing_account a ON a.id = i.account_id
             GROUP BY i.transaction_id) s
     WHERE s.total <> 0 OR s.currencies > 1
        OR EXISTS (SELECT 1 FROM billing_entry e JOIN billing_account a ON a.id = e.account_id
                    WHERE e.transaction_id = s.transaction_id AND a.currency <> s.currency)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % is unbalanced: entries sum to % in % currencies',
            bad.transaction_id, bad.total, bad.currencies USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql SET enable_seqscan = off;

ALTER FUNCTION billing_transaction_has_entries() SET enable_seqscan = off;
"""

BACKWARD = r"""
ALTER FUNCTION billing_transaction_has_entries() RESET enable_seqscan;

CREATE OR REPLACE FUNCTION billing_entries_balanced() RETURNS trigger AS $$
DECLARE
    bad record;
BEGIN
    SELECT e.transaction_id, sum(e.amount) AS total, count(DISTINCT a.currency) AS currencies INTO bad
      FROM billing_entry e JOIN billing_account a ON a.id = e.account_id
     WHERE e.transaction_id IN (SELECT DISTINCT transaction_id FROM inserted)
     GROUP BY e.transaction_id
    HAVING sum(e.amount) <> 0 OR count(DISTINCT a.currency) > 1
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger transaction % is unbalanced: entries sum to % in % currencies',
            bad.transaction_id, bad.total, bad.currencies USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
ALTER FUNCTION billing_entries_balanced() RESET ALL;

DROP TRIGGER billing_charges_match_allocations ON billing_charge;
DROP FUNCTION billing_charges_match_allocations();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0005_statement_level_ledger_triggers"),
        ("workers", "0004_usage_payments_settings"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="charge",
            name="allocation",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="charges",
                to="workers.allocation",
            ),
        ),
        migrations.AlterField(
            model_name="charge",
            name="chip_type",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="workers.chiptype",
            ),
        ),
        migrations.AlterField(
            model_name="charge",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="charges",
                to="workers.job",
            ),
        ),
        migrations.AlterField(
            model_name="charge",
            name="owner",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="charges",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="charge",
            name="transaction",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="charges",
                to="billing.transaction",
            ),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
