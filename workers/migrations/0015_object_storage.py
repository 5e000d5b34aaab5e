"""Datasets and uploaded models move from MEDIA_ROOT into object storage (STORAGE_URL); checkpoints are recorded.

Existing rows are migrated: each dataset file under MEDIA_ROOT becomes the tree
datasets/<owner id>/<uuid>/data.<txt|jsonl>, and each model folder MEDIA_ROOT/models/<owner id>/<uuid>/
the tree of the same key (UploadedModel.directory was that path; it becomes store_prefix). A file that is
gone stays a row whose reads fail, saying nothing is stored there. The old files are left in place.
"""

import tempfile
import uuid
from pathlib import Path

from django.conf import settings
from django.db import migrations, models

TEXT_FILE, JSONL_FILE = "data.txt", "data.jsonl"


def move_to_storage(apps, schema_editor):
    Dataset = apps.get_model("workers", "Dataset")
    UploadedModel = apps.get_model("workers", "UploadedModel")
    datasets = list(Dataset.objects.filter(store_prefix=""))
    models_ = list(UploadedModel.objects.all())
    if not datasets and not models_:
        return
    from kernel.storage import open_store
    from kernel.storage.trees import read_manifest, sha256_file, upload_tree

    store = open_store(settings.STORAGE_URL)
    media = Path(settings.MEDIA_ROOT)
    for dataset in datasets:
        dataset.store_prefix = f"datasets/{dataset.owner_id}/{uuid.uuid4().hex}"
        dataset.file_name = TEXT_FILE if dataset.kind == "text" else JSONL_FILE
        source = media / dataset.file.name if dataset.file else None
        if source is not None and source.is_file():
            with tempfile.TemporaryDirectory() as folder:
                copy = Path(folder) / dataset.file_name
                copy.write_bytes(source.read_bytes())
                dataset.sha256 = sha256_file(copy)
                upload_tree(store, dataset.store_prefix, Path(folder))
        dataset.save(update_fields=["store_prefix", "file_name", "sha256"])
    for model in models_:
        folder = media / model.store_prefix
        if folder.is_dir() and read_manifest(store, model.store_prefix) is None:
            upload_tree(store, model.store_prefix, folder)


class Migration(migrations.Migration):
    dependencies = [
        ("workers", "0014_node_address_observed"),
    ]

    operations = [
        migrations.AddField(
            model_name="dataset",
            name="store_prefix",
            field=models.CharField(default="", max_length=255, help_text="The dataset's tree in object storage"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="dataset",
            name="file_name",
            field=models.CharField(
                default="", max_length=40, help_text="The file in the tree: data.txt or data.jsonl"
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="dataset",
            name="sha256",
            field=models.CharField(default="", max_length=64),
            preserve_default=False,
        ),
        migrations.RenameField(model_name="uploadedmodel", old_name="directory", new_name="store_prefix"),
        migrations.AlterField(
            model_name="uploadedmodel",
            name="store_prefix",
            field=models.CharField(help_text="The model's tree in object storage", max_length=255, unique=True),
        ),
        migrations.RunPython(move_to_storage, migrations.RunPython.noop, elidable=True),
        migrations.RemoveField(model_name="dataset", name="file"),
        migrations.AlterField(
            model_name="dataset",
            name="store_prefix",
            field=models.CharField(help_text="The dataset's tree in object storage", max_length=255, unique=True),
        ),
        migrations.CreateModel(
            name="JobCheckpoint",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("epoch", models.PositiveIntegerField()),
                ("step", models.PositiveIntegerField()),
                ("key", models.CharField(max_length=255)),
                ("stopping", models.BooleanField(default=False)),
                ("bytes", models.PositiveBigIntegerField(blank=True, null=True)),
                ("created_at", models.DateTimeField()),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=models.deletion.CASCADE, related_name="checkpoints", to="workers.job"
                    ),
                ),
            ],
            options={"ordering": ["job", "step", "id"]},
        ),
        migrations.AddConstraint(
            model_name="jobcheckpoint",
            constraint=models.UniqueConstraint(fields=("job", "key"), name="job_checkpoint_key_unique"),
        ),
    ]
