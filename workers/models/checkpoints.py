"""The checkpoints a job's ranks saved in object storage, as reported, for pruning and usage."""

from __future__ import annotations

from django.db import models


class JobCheckpoint(models.Model):
    """One reported checkpoint: the tree at `key` (checkpoints/job-<id>/step-<n>).

    `stopping`: saved for a stop (a reclaim notice, a credit stop, a cancel that keeps state), which
    pruning always keeps. `bytes` is the tree's size from its manifest, filled in after the report.
    `loss` is the global train loss of the step saved, `eval_loss` the held-out loss when it was measured at
    that step (as the ranks reported them; null from runtimes that did not). The row goes when pruning, or
    its owner, deletes the tree.
    """

    job = models.ForeignKey("fleet.Job", on_delete=models.CASCADE, related_name="checkpoints")
    epoch = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    key = models.CharField(max_length=255)
    stopping = models.BooleanField(default=False)
    bytes = models.PositiveBigIntegerField(null=True, blank=True)
    loss = models.FloatField(null=True, blank=True)
    eval_loss = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["job", "step", "id"]
        constraints = [models.UniqueConstraint(fields=["job", "key"], name="job_checkpoint_key_unique")]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.step}"
