"""The move of chip types, pools, nodes, jobs, allocations and uploads from workers to fleet changes no data.

A database filled at the old layout (fleet not yet migrated, the rows written through workers' models)
migrates forward, and every row reads back through fleet's models, with the foreign keys of workers,
billing and the market pointing at them, the same content types (so the same permissions), and the audit
log's labels following."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from base.models import AuditEntry
from billing.models import Price
from fleet.models import Allocation, ChipType, Dataset, Job, Node, Pool, UploadedModel
from market.models import Bid
from tests.support.migrating import migrate
from workers.models import JobEvent

OLD_LAYOUT = [("fleet", None)]  # takes back everything that depends on the move, in every app


def everything_latest() -> list[tuple[str, str]]:
    graph = MigrationExecutor(connection).loader.graph
    return [node for node in graph.leaf_nodes()]


@pytest.mark.django_db(transaction=True)
def test_rows_written_at_the_old_layout_read_back_through_fleet():
    newest = everything_latest()
    migrate(OLD_LAYOUT)
    try:
        loader = MigrationExecutor(connection).loader
        old = loader.project_state(list(loader.applied_migrations)).apps
        now = timezone.now()
        user = old.get_model("auth", "User").objects.create(username="before-the-move")
        chip = old.get_model("workers", "ChipType").objects.create(
            slug="moved-chip", name="Moved", vendor="Test", family="gpu", memory_gib=24, bf16_tflops="80.0",
            memory_bandwidth_gbps=1000, software_stack="cuda", default_mfu="0.400",
        )  # fmt: skip
        pool = old.get_model("workers", "Pool").objects.create(chip_type=chip, zone="z", name="moved-pool")
        node = old.get_model("workers", "Node").objects.create(pool=pool, hostname="moved-host", chips=4)
        dataset = old.get_model("workers", "Dataset").objects.create(
            owner=user, name="d", kind="text", store_prefix="datasets/moved", file_name="data.txt", sha256="0" * 64,
            size_bytes=10, samples=1,
        )  # fmt: skip
        upload = old.get_model("workers", "UploadedModel").objects.create(
            owner=user, name="m", architecture="llama", parameters=1, size_bytes=1, config={}, shape={},
            store_prefix="models/moved",
        )  # fmt: skip
        job = old.get_model("workers", "Job").objects.create(
            owner=user, model_name=f"model:{upload.pk}", dataset_upload=dataset, per_device_batch_size=2,
            max_steps=10, max_budget_per_hour=1_000_000, status="running",
        )  # fmt: skip
        allocation = old.get_model("workers", "Allocation").objects.create(
            job=job, node=node, chip_type=chip, chips=2, epoch=1, started_at=now, billed_through=now
        )
        old.get_model("workers", "JobEvent").objects.create(
            job=job, kind="started", message="before the move", created_at=now
        )
        old.get_model("billing", "Price").objects.create(
            chip_type=chip, on_demand_per_hour=2_000_000, spot_floor_per_hour=500_000, effective_at=now
        )
        old.get_model("market", "Bid").objects.create(
            owner=user, job=job, chip_type=chip, chips=1, max_price_per_hour=900_000, placed_at=now
        )
        content_type = old.get_model("contenttypes", "ContentType").objects.get_or_create(
            app_label="workers", model="node"
        )[0]
        old.get_model("auth", "Permission").objects.get_or_create(
            content_type=content_type, codename="change_node", defaults={"name": "Can change node"}
        )
        old.get_model("base", "AuditEntry").objects.create(
            action="node.drain", target_type="workers.node", target_id=str(node.pk), target_repr="moved-host"
        )
    finally:
        migrate(newest)

    moved_job = Job.objects.get(pk=job.pk)
    assert (moved_job.owner.username, moved_job.dataset_upload, moved_job.status) == (
        "before-the-move",
        Dataset.objects.get(pk=dataset.pk),
        "running",
    )
    assert UploadedModel.objects.get(pk=upload.pk).store_prefix == "models/moved"
    assert Allocation.objects.get(pk=allocation.pk).node == Node.objects.get(hostname="moved-host")
    assert Node.objects.get(pk=node.pk).pool == Pool.objects.get(name="moved-pool")
    assert JobEvent.objects.get(job=moved_job).message == "before the move"
    assert Price.objects.get(chip_type__slug="moved-chip").chip_type == ChipType.objects.get(pk=chip.pk)
    assert Bid.objects.get(job=moved_job).chip_type.slug == "moved-chip"
    assert list(moved_job.allocations.all()) == [Allocation.objects.get(pk=allocation.pk)]

    # The content type is the same row, now labelled fleet, and the operators' permissions go with it.
    node_type = ContentType.objects.get_for_model(Node)
    assert (node_type.pk, node_type.app_label) == (content_type.pk, "fleet")
    assert Permission.objects.filter(content_type=node_type, codename="change_node").exists()
    assert AuditEntry.objects.get(action="node.drain").target_type == "fleet.node"
    # A new allocation still gets its billing line from the database trigger on the old table.
    Allocation.objects.create(
        job=moved_job, node_id=node.pk, chip_type_id=chip.pk, chips=1, epoch=2, started_at=now + timedelta(seconds=1),
        billed_through=now + timedelta(seconds=1),
    )  # fmt: skip
    assert moved_job.billing_lines.count() >= 1


@pytest.mark.django_db
def test_the_moved_models_keep_their_tables():
    tables = {model._meta.db_table for model in (ChipType, Pool, Node, Job, Allocation, Dataset, UploadedModel)}
    assert tables == {
        "workers_chiptype",
        "workers_pool",
        "workers_node",
        "workers_job",
        "workers_allocation",
        "workers_dataset",
        "workers_uploadedmodel",
    }
