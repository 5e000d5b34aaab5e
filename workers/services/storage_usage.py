"""How many bytes each user and each job keeps in object storage, counted from the store's own listing
(so crashed saves, universal conversions and files no row refers to are counted too)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from fleet.models import Dataset, Job, UploadedModel
from kernel.storage import Store

CATEGORIES = ("datasets", "models", "checkpoints")
JOB_FOLDER = re.compile(r"^job-([0-9]{1,18})$")


@dataclass
class StorageUsage:
    users: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: dict.fromkeys(CATEGORIES, 0)))
    jobs: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # checkpoint bytes per job
    # Bytes no user owns: "hub" (Hub snapshots, the platform's), "unreferenced <category>" (no row names
    # them: a delete that failed, an upload whose row was never written), "other".
    unowned: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    objects: int = 0

    @property
    def total(self) -> int:
        return sum(sum(row.values()) for row in self.users.values()) + sum(self.unowned.values())


def storage_usage(store: Store) -> StorageUsage:
    """Walk every object once and attribute its bytes to a user (and a job) by its key."""
    owners = {
        "datasets": dict(Dataset.objects.values_list("store_prefix", "owner_id")),
        "models": dict(UploadedModel.objects.values_list("store_prefix", "owner_id")),
    }
    job_owners = dict(Job.objects.filter(checkpoints__isnull=False).distinct().values_list("pk", "owner_id"))
    usage = StorageUsage()
    for item in store.list(""):
        usage.objects += 1
        parts = item.key.split("/")
        top = parts[0]
        if top in owners:
            owner = owners[top].get("/".join(parts[:3]))
            if owner is None:
                usage.unowned[f"unreferenced {top}"] += item.size
            else:
                usage.users[owner][top] += item.size
        elif top == "checkpoints" and len(parts) > 2 and (match := JOB_FOLDER.match(parts[1])):
            job_id = int(match[1])
            owner = job_owners.get(job_id)
            if owner is None:
                owner = Job.objects.filter(pk=job_id).values_list("owner_id", flat=True).first()
                job_owners[job_id] = owner
            if owner is None:
                usage.unowned["unreferenced checkpoints"] += item.size
            else:
                usage.users[owner]["checkpoints"] += item.size
                usage.jobs[job_id] += item.size
        elif top == "hub":
            usage.unowned["hub"] += item.size
        else:
            usage.unowned["other"] += item.size
    return usage
