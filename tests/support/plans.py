"""Plans for tests: a plan as the planner would make it, built by hand."""

from __future__ import annotations

from kernel.planner import Plan


def hand_plan(*nodes_and_batches, **fields) -> Plan:
    """A plan as the planner would make it, placing one rank per (node, micro-batch); `fields` set
    its estimates (a price, a global batch)."""
    return Plan.from_dict(
        {
            "zero_stage": 0,
            "ranks": [
                {
                    "chip": node.pool.chip_type.slug,
                    "node_id": node.pk,
                    "hostname": node.hostname,
                    "micro_batch": batch,
                    "mode": "on_demand",
                    "tokens_per_s": 1000.0,
                    "simulated": True,
                    "paced_tokens_per_s": 1000.0,
                }
                for node, batch in nodes_and_batches
            ],
            **fields,
        }
    )
