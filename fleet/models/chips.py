"""The compute fleet: chip types, pools of one chip type in one zone, and nodes in pools."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q, Sum
from django.utils.translation import gettext_lazy as _

from fleet.choices import AgentStatus, ChipFamily, SoftwareStack

# The unit of work on the pricing page: one RTX 4090-hour of delivered bf16 compute.
REFERENCE_CHIP = "rtx-4090"


class ChipType(models.Model):
    """A kind of accelerator and its specs."""

    slug = models.SlugField(max_length=40, unique=True, verbose_name=_("slug"))
    name = models.CharField(max_length=80, verbose_name=_("name"))
    vendor = models.CharField(max_length=40, verbose_name=_("vendor"))
    family = models.CharField(max_length=8, choices=ChipFamily.choices, verbose_name=_("family"))
    memory_gib = models.PositiveIntegerField(verbose_name=_("memory gib"))
    bf16_tflops = models.DecimalField(
        max_digits=8, decimal_places=1, validators=[MinValueValidator(Decimal("0.1"))], verbose_name=_("bf16 tflops")
    )
    memory_bandwidth_gbps = models.PositiveIntegerField(help_text=_("GB/s"), verbose_name=_("memory bandwidth gbps"))
    software_stack = models.CharField(max_length=8, choices=SoftwareStack.choices, verbose_name=_("software stack"))
    default_mfu = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        validators=[MinValueValidator(Decimal("0.01")), MaxValueValidator(Decimal("1"))],
        help_text=_("Model FLOPs utilisation assumed before the platform has measured this chip."),
        verbose_name=_("default mfu"),
    )
    sort_order = models.PositiveSmallIntegerField(default=0, verbose_name=_("sort order"))

    class Meta:
        verbose_name = _("chip type")
        verbose_name_plural = _("chip types")
        db_table = "workers_chiptype"  # its table from before the move
        ordering = ["sort_order", "slug"]
        constraints = [
            models.CheckConstraint(condition=Q(bf16_tflops__gt=0), name="chip_tflops_positive"),
            models.CheckConstraint(condition=Q(default_mfu__gt=0, default_mfu__lte=1), name="chip_mfu_in_range"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def delivered_tflops(self) -> Decimal:
        return self.bf16_tflops * self.default_mfu


class Pool(models.Model):
    """Chips of one type in one zone."""

    chip_type = models.ForeignKey(ChipType, on_delete=models.PROTECT, related_name="pools", verbose_name=_("chip type"))
    zone = models.CharField(max_length=40, verbose_name=_("zone"))
    name = models.SlugField(max_length=80, unique=True, verbose_name=_("name"))
    # The pool's link to other islands of a run (other stacks, other sites), as the operator declares it:
    # what the planner prices the bridge between islands at (kernel/planner/islands.py). 0: not declared.
    bridge_gbps = models.FloatField(
        default=0,
        validators=[MinValueValidator(0)],
        help_text=_("Gbit/s to other pools' islands (0: not declared)"),
        verbose_name=_("bridge gbps"),
    )

    class Meta:
        verbose_name = _("pool")
        verbose_name_plural = _("pools")
        db_table = "workers_pool"  # its table from before the move
        ordering = ["chip_type__sort_order", "zone"]
        constraints = [models.UniqueConstraint(fields=["chip_type", "zone"], name="one_pool_per_chip_and_zone")]

    def __str__(self) -> str:
        return self.name

    def chip_count(self) -> int:
        return self.nodes.aggregate(total=Sum("chips"))["total"] or 0


class Node(models.Model):
    """A host in a pool with some chips of the pool's type, run by a node agent."""

    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="nodes", verbose_name=_("pool"))
    hostname = models.CharField(max_length=120, unique=True, verbose_name=_("hostname"))
    chips = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(64)], verbose_name=_("chips")
    )
    agent_status = models.CharField(
        max_length=16, choices=AgentStatus.choices, default=AgentStatus.UNENROLLED, verbose_name=_("agent status")
    )
    last_heartbeat_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last heartbeat at"))
    simulated = models.BooleanField(
        default=False,
        help_text=_("Runs real training on a CPU, paced to this chip type's speed."),
        verbose_name=_("simulated"),
    )
    spot_eligible = models.BooleanField(default=False, verbose_name=_("spot eligible"))
    token_hash = models.CharField(
        max_length=64, null=True, blank=True, unique=True, editable=False, verbose_name=_("token hash")
    )
    approved_chips = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text=_(
            "The most chips this host's agent may declare (from its enrollment token; operators may change it)."
        ),
        verbose_name=_("approved chips"),
    )
    address = models.CharField(
        max_length=120, blank=True, help_text=_("Where this node's ranks can be reached."), verbose_name=_("address")
    )
    address_observed = models.BooleanField(
        default=False,
        help_text=_(
            "The address is the one the platform sees the agent's requests come from (its agent declared "
            "none); it follows the agent when that changes."
        ),
        verbose_name=_("address observed"),
    )
    devices = models.JSONField(default=list, blank=True, verbose_name=_("devices"))
    health = models.JSONField(default=dict, blank=True, verbose_name=_("health"))
    agent_version = models.CharField(max_length=40, blank=True, verbose_name=_("agent version"))
    enrolled_at = models.DateTimeField(null=True, blank=True, verbose_name=_("enrolled at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        db_table = "workers_node"  # its table from before the move
        ordering = ["pool", "hostname"]
        constraints = [models.CheckConstraint(condition=Q(chips__gte=1), name="node_has_chips")]

    def __str__(self) -> str:
        return f"{self.hostname} ({self.chips}× {self.pool.chip_type.slug}{', simulated' if self.simulated else ''})"
