"""Job.model_spec: the model as planning sized it, for the market's fit check; filled in for live jobs."""

from django.db import migrations, models

FINISHED = ["succeeded", "failed", "cancelled", "stopped_no_credit"]


def size_live_jobs(apps, schema_editor):
    """Live jobs get the spec planning resolves for them now (a model that can't be resolved stays None)."""
    from workers.services.models import ModelUnavailable
    from workers.services.planning import model_spec
    from kernel.spec import JobSpec

    Job = apps.get_model("workers", "Job")
    for job in Job.objects.exclude(status__in=FINISHED).iterator():
        try:
            spec = model_spec(JobSpec.of_job(job))
        except (ModelUnavailable, KeyError, TypeError, ValueError):
            continue
        Job.objects.filter(pk=job.pk).update(model_spec=spec.as_dict())


class Migration(migrations.Migration):
    dependencies = [
        ("workers", "0016_node_throughput"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="model_spec",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(size_live_jobs, migrations.RunPython.noop),
    ]
