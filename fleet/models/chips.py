"""The compute fleet: chip types, pools of one chip type in one zone, and nodes in pools."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q, Sum

from fleet.choices import AgentStatus, ChipFamily, SoftwareStack

# The unit of work on the pricing page: one RTX 4090-hour of delivered bf16 compute.
REFERENCE_CHIP = "rtx-4090"


class ChipType(models.Model):
    """A kind of accelerator and its specs."""

    slug = models.SlugField(max_length=40, unique=True)
    name = models.CharField(max_length=80)
    vendor = models.CharField(max_length=40)
    family = models.CharField(max_length=8, choices=ChipFamily.choices)
    memory_gib = models.PositiveIntegerField()
    bf16_tflops = models.DecimalField(max_digits=8, decimal_places=1, validators=[MinValueValidator(Decimal("0.1"))])
    memory_bandwidth_gbps = models.PositiveIntegerField(help_text="GB/s")
    software_stack = models.CharField(max_length=8, choices=SoftwareStack.choices)
    default_mfu = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        validators=[MinValueValidator(Decimal("0.01")), MaxValueValidator(Decimal("1"))],
        help_text="Model FLOPs utilisation assumed before the platform has measured this chip.",
    )
    sort_order = models.PositiveSmallIntegerField(default=0)

    class Meta:
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

    chip_type = models.ForeignKey(ChipType, on_delete=models.PROTECT, related_name="pools")
    zone = models.CharField(max_length=40)
    name = models.SlugField(max_length=80, unique=True)
    # The pool's link to other islands of a run (other stacks, other sites), as the operator declares it:
    # what the planner prices the bridge between islands at (kernel/planner/islands.py). 0: not declared.
    bridge_gbps = models.FloatField(
        default=0, validators=[MinValueValidator(0)], help_text="Gbit/s to other pools' islands (0: not declared)"
    )

    class Meta:
        db_table = "workers_pool"  # its table from before the move
        ordering = ["chip_type__sort_order", "zone"]
        constraints = [models.UniqueConstraint(fields=["chip_type", "zone"], name="one_pool_per_chip_and_zone")]

    def __str__(self) -> str:
        return self.name

    def chip_count(self) -> int:
        return self.nodes.aggregate(total=Sum("chips"))["total"] or 0


class Node(models.Model):
    """A host in a pool with some chips of the pool's type, run by a node agent."""

    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="nodes")
    hostname = models.CharField(max_length=120, unique=True)
    chips = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(64)])
    agent_status = models.CharField(max_length=16, choices=AgentStatus.choices, default=AgentStatus.UNENROLLED)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    simulated = models.BooleanField(
        default=False, help_text="Runs real training on a CPU, paced to this chip type's speed."
    )
    spot_eligible = models.BooleanField(default=False)
    token_hash = models.CharField(max_length=64, null=True, blank=True, unique=True, editable=False)
    approved_chips = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="The most chips this host's agent may declare (from its enrollment token; operators may change it).",
    )
    address = models.CharField(max_length=120, blank=True, help_text="Where this node's ranks can be reached.")
    address_observed = models.BooleanField(
        default=False,
        help_text="The address is the one the platform sees the agent's requests come from (its agent declared "
        "none); it follows the agent when that changes.",
    )
    devices = models.JSONField(default=list, blank=True)
    health = models.JSONField(default=dict, blank=True)
    agent_version = models.CharField(max_length=40, blank=True)
    enrolled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "workers_node"  # its table from before the move
        ordering = ["pool", "hostname"]
        constraints = [models.CheckConstraint(condition=Q(chips__gte=1), name="node_has_chips")]

    def __str__(self) -> str:
        return f"{self.hostname} ({self.chips}× {self.pool.chip_type.slug}{', simulated' if self.simulated else ''})"
