"""Charges and refunds are records of money moved: append-only like the ledger (see 0002)."""

from django.db import migrations

FORWARD = """
CREATE TRIGGER billing_charge_append_only BEFORE UPDATE OR DELETE ON billing_charge
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();
CREATE TRIGGER billing_refund_append_only BEFORE UPDATE OR DELETE ON billing_refund
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();
"""

BACKWARD = """
DROP TRIGGER billing_refund_append_only ON billing_refund;
DROP TRIGGER billing_charge_append_only ON billing_charge;
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_usage_payments_settings")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
