"""Statuses and kinds of the compute fleet."""

from django.db import models


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
    UNENROLLED = "unenrolled", "Not enrolled"
    ONLINE = "online", "Online"
    DRAINING = "draining", "Draining"
    OFFLINE = "offline", "Offline"
    LOST = "lost", "Lost"


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    PLANNING = "planning", "Planning"
    PROVISIONING = "provisioning", "Provisioning"
    RUNNING = "running", "Running"
    MIGRATING = "migrating", "Migrating"
    STOPPING = "stopping", "Stopping"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    STOPPED_NO_CREDIT = "stopped_no_credit", "Stopped: out of credit"

    @classmethod
    def finished(cls) -> set[str]:
        return {cls.SUCCEEDED, cls.FAILED, cls.CANCELLED, cls.STOPPED_NO_CREDIT}

    @classmethod
    def active(cls) -> set[str]:
        return {cls.PROVISIONING, cls.RUNNING, cls.MIGRATING, cls.STOPPING}


class Policy(models.TextChoices):
    COST_PERFORMANCE = "cost-performance", "Cost-performance"
    FASTEST = "fastest", "Fastest"
    CHEAPEST = "cheapest", "Cheapest"
    SINGLE_TYPE = "single-type", "Single chip type"


class AllocationMode(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    SPOT = "spot", "Spot"


class JobEventKind(models.TextChoices):
    QUEUED = "queued", "Queued"
    PLACED = "placed", "Placed"
    STARTED = "started", "Started"
    CHECKPOINTED = "checkpointed", "Checkpointed"
    NOTICE = "notice", "Notice"
    MIGRATED = "migrated", "Migrated"
    RESUMED = "resumed", "Resumed"
    CANCEL_REQUESTED = "cancel_requested", "Cancel requested"
    STOPPED = "stopped", "Stopped"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    WAITING = "waiting", "Waiting for chips"
    ISLAND = "island", "Island"


class CommandStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DONE = "done", "Done"
    REFUSED = "refused", "Refused"


class DatasetKind(models.TextChoices):
    """The record kinds of kernel.datasets.files."""

    TEXT = "text", "Plain text"
    JSONL = "jsonl", "JSON lines"
    CHAT = "chat", "Chat"
    COMPLETION = "completion", "Prompt and completion"


class TrainingMode(models.TextChoices):
    FULL = "full", "Full fine-tuning"
    LORA = "lora", "LoRA adapter"


class MigrationReason(models.TextChoices):
    OUTBID = "outbid", "Outbid on the spot market"
    ON_DEMAND = "on_demand", "Chips needed for on-demand work"
    BID_CANCELLED = "bid_cancelled", "Bid cancelled"
    MAINTENANCE = "maintenance", "Node reclaimed by the operator"
    LOST_NODE = "lost_node", "Node lost (no heartbeat)"


class MigrationStatus(models.TextChoices):
    NOTICE = "notice", "Checkpointing"
    WAITING = "waiting", "Waiting for chips"
    RESUMING = "resuming", "Resuming"
    RESUMED = "resumed", "Resumed"
    # The ranks trained the last step and saved the model before the notice reached them: no move needed.
    FINISHED = "finished", "Finished before moving"
    ABANDONED = "abandoned", "Abandoned"
    # A run of islands: the affected islands left and the others trained on (workers/services/lifecycle/islands.py).
    ISLAND_LEFT = "island_left", "Island left; the others went on"
