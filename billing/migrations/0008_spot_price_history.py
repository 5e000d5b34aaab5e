"""The spot price history moves from the market app to billing (its table keeps its name).

State only: billing's pricing reads what a spot chip-hour cost at any moment from this history, so
it lives beside the list prices; the market records each clearing here.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_staff_two_factor"),
        ("market", "0003_spot_reservation"),
        ("workers", "0009_lost_work_end"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="SpotPrice",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("at", models.DateTimeField()),
                        ("price_per_hour", models.BigIntegerField(help_text="micro-units per chip-hour")),
                        ("floor_per_hour", models.BigIntegerField()),
                        ("capacity", models.PositiveIntegerField()),
                        ("demand", models.PositiveIntegerField()),
                        ("allocated", models.PositiveIntegerField()),
                        (
                            "chip_type",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="spot_prices",
                                to="workers.chiptype",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "market_spotprice",
                        "ordering": ["-at", "-id"],
                        "indexes": [models.Index(fields=["chip_type", "at"], name="market_spot_chip_ty_4387f6_idx")],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("price_per_hour__gte", 0)), name="spot_price_not_negative"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
