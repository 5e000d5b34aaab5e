"""Celery beat's schedule (the CELERY_BEAT_SCHEDULE setting): the platform's periodic tasks, each period read
from the environment (README "Configuration")."""

from portal.env import env_int

CELERY_BEAT_SCHEDULE = {
    "reconcile-jobs": {"task": "workers.tasks.reconcile_jobs", "schedule": env_int("RECONCILE_SECONDS", 2)},
    "schedule-waiting-jobs": {
        "task": "workers.tasks.schedule_waiting_jobs",
        "schedule": env_int("RECONCILE_SECONDS", 2),
        # A pass still waiting when the next is due is dropped: slow passes never pile up in the queue.
        "options": {"expires": env_int("RECONCILE_SECONDS", 2)},
    },
    "scale-deployments": {
        "task": "workers.tasks.scale_deployments_task",
        "schedule": env_int("RECONCILE_SECONDS", 2),
    },
    "clear-spot-market": {"task": "market.tasks.clear_market", "schedule": env_int("SPOT_CLEARING_SECONDS", 5)},
    "run-meter": {"task": "billing.tasks.run_meter", "schedule": env_int("METER_SECONDS", 5)},
    "audit-ledger": {"task": "billing.tasks.audit_ledger", "schedule": env_int("LEDGER_AUDIT_SECONDS", 300)},
    "purge-idempotency-keys": {"task": "base.tasks.purge_idempotency_keys", "schedule": 3600},
    # Old checkpoints and crashed saves out of object storage (workers/services/checkpoints.py).
    "prune-checkpoints": {
        "task": "workers.tasks.prune_checkpoints",
        "schedule": env_int("CHECKPOINT_PRUNE_SECONDS", 600),
    },
    # Finished jobs' log lines and metrics past the operator's retention (workers/services/retention.py).
    "prune-job-telemetry": {
        "task": "workers.tasks.prune_job_telemetry",
        "schedule": env_int("TELEMETRY_PRUNE_SECONDS", 3600),
    },
}
