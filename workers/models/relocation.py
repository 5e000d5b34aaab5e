"""Hot migrations: a job moved off chips that were reclaimed or lost, and what it cost the user."""

from __future__ import annotations

from django.db import models

from base.stored_text import render_column
from fleet.choices import MigrationReason, MigrationStatus
from kernel.money import format_amount


class JobMigration(models.Model):
    """One move of a running job: why, when the notice came, the checkpoint it resumed from, and the refund."""

    job = models.ForeignKey("fleet.Job", on_delete=models.PROTECT, related_name="migrations")
    reason = models.CharField(max_length=16, choices=MigrationReason.choices)
    detail = models.TextField(blank=True)
    # The detail's msgid and values (base.stored_text): the job page shows it in the reader's language.
    detail_text = models.JSONField(default=dict, db_default={}, blank=True)
    status = models.CharField(max_length=12, choices=MigrationStatus.choices, default=MigrationStatus.NOTICE)
    from_epoch = models.PositiveIntegerField()
    to_epoch = models.PositiveIntegerField(null=True, blank=True)
    nodes = models.JSONField(default=list, help_text="Hostnames whose chips were reclaimed or lost")
    notice_at = models.DateTimeField(help_text="When the reclaim was decided (billing of the old chips stops here)")
    notice_seconds = models.PositiveIntegerField()
    last_seen_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A lost node's last sign of work (heartbeat or reported step): unsaved work is counted up to here",
    )
    step_at_notice = models.PositiveIntegerField(default=0)
    checkpoint_step = models.PositiveIntegerField(null=True, blank=True)
    checkpoint_at = models.DateTimeField(null=True, blank=True)
    replanned_at = models.DateTimeField(null=True, blank=True)
    resumed_at = models.DateTimeField(null=True, blank=True)
    resume_step = models.PositiveIntegerField(null=True, blank=True)
    steps_lost = models.PositiveIntegerField(null=True, blank=True)
    lost_seconds = models.FloatField(null=True, blank=True, help_text="Training time before the notice not saved")
    refund = models.BigIntegerField(default=0, help_text="micro-units")
    refund_transaction = models.OneToOneField(
        "billing.Transaction", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["notice_at", "id"]

    def __str__(self) -> str:
        return f"job {self.job_id} migration {self.pk} ({self.reason})"

    @property
    def detail_display(self) -> str:
        """The detail in the active language (as stored when it was stored as plain text)."""
        return render_column(self.detail, self.detail_text)

    @property
    def refund_display(self) -> str:
        return format_amount(self.refund)

    @property
    def downtime_seconds(self) -> float | None:
        return (self.resumed_at - self.notice_at).total_seconds() if self.resumed_at else None
