"""The spot price history now belongs to billing (billing 0008); the table stays as it is."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("market", "0003_spot_reservation"),
        ("billing", "0008_spot_price_history"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="SpotPrice")],
            database_operations=[],
        ),
    ]
