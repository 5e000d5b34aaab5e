"""Database-enforced ledger rules, so that no code path (ORM, admin, raw SQL) can break them.

- each entry insert moves its account's running balance (and the wallet check constraint then
  refuses a negative wallet);
- at commit, every transaction's entries sum to zero in a single currency, and a transaction
  has entries (deferred constraint triggers);
- entries, transactions and prices are append-only: UPDATE and DELETE raise. (TRUNCATE, used
  only by test teardown, is not a row operation and is left alone.)
"""

from django.db import migrations

FORWARD = r"""
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
    IF total <> 0 THEN
        RAISE EXCEPTION 'ledger transaction % is unbalanced: entries sum to %', NEW.transaction_id, total
            USING ERRCODE = 'check_violation';
    END IF;
    IF currencies > 1 THEN
        RAISE EXCEPTION 'ledger transaction % mixes currencies', NEW.transaction_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER billing_entry_balanced AFTER INSERT ON billing_entry
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION billing_entry_balanced();

CREATE FUNCTION billing_transaction_has_entries() RETURNS trigger AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM billing_entry WHERE transaction_id = NEW.id) THEN
        RAISE EXCEPTION 'ledger transaction % has no entries', NEW.id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER billing_transaction_has_entries AFTER INSERT ON billing_transaction
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION billing_transaction_has_entries();

CREATE FUNCTION billing_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are append-only (% refused)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END $$ LANGUAGE plpgsql;

CREATE TRIGGER billing_entry_append_only BEFORE UPDATE OR DELETE ON billing_entry
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();
CREATE TRIGGER billing_transaction_append_only BEFORE UPDATE OR DELETE ON billing_transaction
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();
CREATE TRIGGER billing_price_append_only BEFORE UPDATE OR DELETE ON billing_price
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();
"""

BACKWARD = r"""
DROP TRIGGER billing_price_append_only ON billing_price;
DROP TRIGGER billing_transaction_append_only ON billing_transaction;
DROP TRIGGER billing_entry_append_only ON billing_entry;
DROP FUNCTION billing_append_only();
DROP TRIGGER billing_transaction_has_entries ON billing_transaction;
DROP FUNCTION billing_transaction_has_entries();
DROP TRIGGER billing_entry_balanced ON billing_entry;
DROP FUNCTION billing_entry_balanced();
DROP TRIGGER billing_entry_apply ON billing_entry;
DROP FUNCTION billing_entry_apply();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
