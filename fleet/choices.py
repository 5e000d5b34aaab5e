"""Statuses and kinds of the compute fleet."""

from django.db import models
from django.utils import translation
from django.utils.translation import gettext_lazy as _


def stored_label(member) -> str:
    """A choice's label in English, for text written into the database (event messages, reasons, ledger memos):
    what is stored stays in one language whatever language the request that wrote it spoke."""
    with translation.override("en"):
        return str(member.label)


class ChipFamily(models.TextChoices):
    GPU = "gpu", "GPU"
    TPU = "tpu", "TPU"
    NPU = "npu", "NPU"


class SoftwareStack(models.TextChoices):
    CUDA = "cuda", "CUDA"
    XLA = "xla", "XLA"
    CANN = "cann", "CANN"
    BANG = "bang", "BANG"


class AgentStatus(models.TextChoices):
    UNENROLLED = "unenrolled", _("Not enrolled")
    ONLINE = "online", _("Online")
    DRAINING = "draining", _("Draining")
    OFFLINE = "offline", _("Offline")
    LOST = "lost", _("Lost")


class JobStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    PLANNING = "planning", _("Planning")
    PROVISIONING = "provisioning", _("Provisioning")
    RUNNING = "running", _("Running")
    MIGRATING = "migrating", _("Migrating")
    STOPPING = "stopping", _("Stopping")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    STOPPED_NO_CREDIT = "stopped_no_credit", _("Stopped: out of credit")

    @classmethod
    def finished(cls) -> set[str]:
        return {cls.SUCCEEDED, cls.FAILED, cls.CANCELLED, cls.STOPPED_NO_CREDIT}

    @classmethod
    def active(cls) -> set[str]:
        return {cls.PROVISIONING, cls.RUNNING, cls.MIGRATING, cls.STOPPING}


class Policy(models.TextChoices):
    COST_PERFORMANCE = "cost-performance", _("Cost-performance")
    FASTEST = "fastest", _("Fastest")
    CHEAPEST = "cheapest", _("Cheapest")
    SINGLE_TYPE = "single-type", _("Single chip type")


class AllocationMode(models.TextChoices):
    ON_DEMAND = "on_demand", _("On-demand")
    SPOT = "spot", _("Spot")


class JobEventKind(models.TextChoices):
    QUEUED = "queued", _("Queued")
    PLACED = "placed", _("Placed")
    STARTED = "started", _("Started")
    CHECKPOINTED = "checkpointed", _("Checkpointed")
    NOTICE = "notice", _("Notice")
    MIGRATED = "migrated", _("Migrated")
    RESUMED = "resumed", _("Resumed")
    CANCEL_REQUESTED = "cancel_requested", _("Cancel requested")
    STOPPED = "stopped", _("Stopped")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    WAITING = "waiting", _("Waiting for chips")
    ISLAND = "island", _("Island")


class CommandStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DONE = "done", "Done"
    REFUSED = "refused", "Refused"


class DatasetKind(models.TextChoices):
    """The record kinds of kernel.datasets.files."""

    TEXT = "text", _("Plain text")
    JSONL = "jsonl", _("JSON lines")
    CHAT = "chat", _("Chat")
    COMPLETION = "completion", _("Prompt and completion")


class TrainingMode(models.TextChoices):
    FULL = "full", _("Full fine-tuning")
    LORA = "lora", _("LoRA adapter")


class MigrationReason(models.TextChoices):
    OUTBID = "outbid", _("Outbid on the spot market")
    ON_DEMAND = "on_demand", _("Chips needed for on-demand work")
    BID_CANCELLED = "bid_cancelled", _("Bid cancelled")
    MAINTENANCE = "maintenance", _("Node reclaimed by the operator")
    LOST_NODE = "lost_node", _("Node lost (no heartbeat)")


class MigrationStatus(models.TextChoices):
    NOTICE = "notice", _("Checkpointing")
    WAITING = "waiting", _("Waiting for chips")
    RESUMING = "resuming", _("Resuming")
    RESUMED = "resumed", _("Resumed")
    # The ranks trained the last step and saved the model before the notice reached them: no move needed.
    FINISHED = "finished", _("Finished before moving")
    ABANDONED = "abandoned", _("Abandoned")
    # A run of islands: the affected islands left and the others trained on (workers/services/lifecycle/islands.py).
    ISLAND_LEFT = "island_left", _("Island left; the others went on")
