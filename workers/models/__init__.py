from workers.models.agents import AgentCommand, EnrollmentToken, hash_secret, new_node_token
from workers.models.fleet import REFERENCE_CHIP, ChipType, Node, Pool
from workers.models.jobs import (
    Allocation,
    Dataset,
    Job,
    JobEvent,
    JobLogLine,
    JobMetric,
    MeasuredThroughput,
    RankExit,
)

__all__ = [
    "REFERENCE_CHIP",
    "AgentCommand",
    "Allocation",
    "ChipType",
    "Dataset",
    "EnrollmentToken",
    "Job",
    "JobEvent",
    "JobLogLine",
    "JobMetric",
    "MeasuredThroughput",
    "Node",
    "Pool",
    "RankExit",
    "hash_secret",
    "new_node_token",
]
