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
