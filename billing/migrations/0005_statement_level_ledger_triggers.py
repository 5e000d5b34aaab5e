"""Ledger triggers per statement instead of per row, so a meter tick that posts thousands of
transactions in one INSERT updates each account once and checks each transaction once.

- Balances: one UPDATE per account per INSERT statement (sum of the inserted amounts), instead of
  one per entry; the wallet CHECK still refuses a negative wallet.
- Balance rule: every transaction touched by an INSERT must sum to zero in one currency when the
  statement ends. All legs of a transaction are therefore inserted in one statement, which
  `post_transaction` and the meter do (bulk_create). The old rule was checked per row at commit.
"""

from django.db import migrations

FORWARD = r"""
DROP TRIGGER billing_entry_apply ON billing_entry;
DROP FUNCTION billing_entry_apply();
DROP TRIGGER billing_entry_balanced ON billing_entry;
DROP FUNCTION billing_entry_balanced();

CREATE FUNCTION billing_entries_apply() RETURNS trigger AS $$
BEGIN
    UPDATE billing_account a SET balance = a.balance + s.total
      FROM (SELECT account_id, sum(amount) AS total FROM inserted GROUP BY account_id) s
     WHERE a.id = s.account_id;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER billing_entries_apply AFTER INSERT ON billing_entry
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION billing_entries_apply();

CREATE FUNCTION billing_entries_balanced() RETURNS trigger AS $$
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

CREATE TRIGGER billing_entries_balanced AFTER INSERT ON billing_entry
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION billing_entries_balanced();
"""

BACKWARD = r"""
DROP TRIGGER billing_entries_balanced ON billing_entry;
DROP FUNCTION billing_entries_balanced();
DROP TRIGGER billing_entries_apply ON billing_entry;
DROP FUNCTION billing_entries_apply();

CREATE FUNCTION billing_entry_apply() RETURNS trigger AS $$
BEGIN
    UPDATE billing_account SET balance = balance + NEW.amount WHERE id = NEW.account_id;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER billing_entry_apply AFTER INSERT ON billing_entry
    FOR EACH ROW EXECUTE FUNCTION billing_entry_apply();

CREATE FUNCTION billing_entry_balanced() RETURNS trigger AS $$
DECLARE
    total numeric;
    currencies integer;
BEGIN
    SELECT coalesce(sum(e.amount), 0), count(DISTINCT a.currency) INTO total, currencies
      FROM billing_entry e JOIN billing_account a ON a.id = e.account_id
     WHERE e.transaction_id = NEW.transaction_id;
    IF total <> 0 OR currencies > 1 THEN
        RAISE EXCEPTION 'ledger transaction % is unbalanced', NEW.transaction_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE CONSTRAINT TRIGGER billing_entry_balanced AFTER INSERT ON billing_entry
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION billing_entry_balanced();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_usage_append_only")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
