"""`manage.py storage_usage`: bytes in object storage per user and per job (datasets, models, checkpoints)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from kernel.storage import StorageError
from workers.services.storage import platform_store
from workers.services.storage_usage import CATEGORIES, storage_usage


class Command(BaseCommand):
    help = (
        "Print the bytes each user keeps in object storage (datasets, models, checkpoints), each job's "
        "checkpoint bytes, and what no user owns (Hub snapshots, files no row refers to). Reads the whole "
        "listing of STORAGE_URL once."
    )

    def handle(self, *args, **options) -> None:
        store = platform_store()
        try:
            usage = storage_usage(store)
        except StorageError as error:
            raise CommandError(f"Can't read object storage: {error}") from None
        names = dict(get_user_model().objects.filter(pk__in=usage.users).values_list("pk", "username"))
        out = self.stdout.write
        out(f"Object storage: {store.describe()} ({usage.objects:,} objects, {usage.total:,} bytes)")
        out("")
        out(f"{'user':<32}" + "".join(f"{name:>16}" for name in (*CATEGORIES, "total")))
        for user_id, row in sorted(usage.users.items(), key=lambda item: -sum(item[1].values())):
            label = f"{names.get(user_id, '?')} (id {user_id})"
            out(f"{label:<32}" + "".join(f"{row[name]:>16,}" for name in CATEGORIES) + f"{sum(row.values()):>16,}")
        out("")
        out(f"{'job':<32}{'checkpoints':>16}")
        for job_id, size in sorted(usage.jobs.items(), key=lambda item: -item[1]):
            out(f"{f'job {job_id}':<32}{size:>16,}")
        if usage.unowned:
            out("")
            out(f"{'owned by no user':<32}{'bytes':>16}")
            for what, size in sorted(usage.unowned.items()):
                out(f"{what:<32}{size:>16,}")
