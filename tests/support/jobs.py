"""Jobs for tests: a small job spec the API accepts."""

from __future__ import annotations

# A small job spec the API accepts, for tests that submit or quote one.
JOB_SPEC = {
    "model": "llama-tiny",
    "dataset": "synthetic",
    "per_device_batch_size": 4,
    "max_steps": 100,
    "policy": "cost-performance",
    "max_budget": "28",
}
