"""Re-run from the job page: /train/?rerun=<id> opens the launch form filled in with that job's settings.

The owner changes what they like and presses Train: the launch goes through the form and `launch()` as any
other. Settings the page has no field for (sequence length, LoRA's, gradient checkpointing, the eval
fraction, a total budget) ride along in hidden fields, so the new job trains as the old one did.
"""

from __future__ import annotations

import json

from fleet.choices import TrainingMode
from fleet.models import Job
from kernel.money import format_amount
from portal.forms import chip_field


def form_initial(job: Job) -> dict:
    """The launch form's values for a job like `job`."""
    initial = {
        "model": job.model_name,
        "dataset": job.dataset,
        "mode": job.mode,
        "eval_dataset": f"upload:{job.eval_dataset_upload_id}" if job.eval_dataset_upload_id else "",
        "eval_every": job.eval_every,
        "policy": job.policy,
        "max_budget": format_amount(job.max_budget_per_hour),
        "max_steps": job.max_steps,
        "per_device_batch_size": job.per_device_batch_size,
        "name": job.name,
        "spot": job.spot,
        "allow_on_demand": job.allow_on_demand,
        "allow_other_chips": job.allow_other_chips,
        **carried(job),
        **{chip_field(slug): count for slug, count in (job.chip_counts or {}).items()},
    }
    if job.spot and job.spot_bid_per_hour is not None:  # else the form's default bid, should Spot be ticked
        initial["bid"] = format_amount(job.spot_bid_per_hour)
    return initial


def carried(job: Job) -> dict:
    """The hidden fields: empty where the job took the API's default."""
    lora = job.mode == TrainingMode.LORA and job.lora
    return {
        "seq_len": job.seq_len or "",
        "lora": json.dumps(job.lora) if lora else "",
        "gradient_checkpointing": "True" if job.gradient_checkpointing else "",
        "eval_fraction": job.eval_fraction or "",
        "total_budget": format_amount(job.total_budget) if job.total_budget else "",
    }
