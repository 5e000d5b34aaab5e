from workers.models.agents import AgentCommand, EnrollmentToken, new_node_token
from workers.models.checkpoints import JobCheckpoint
from workers.models.fleet import REFERENCE_CHIP, ChipType, Node, Pool
from workers.models.hfmodels import UploadedModel
from workers.models.jobs import (
    Allocation,
    Dataset,
    Job,
    JobEval,
    JobEvent,
    JobLogLine,
    JobMetric,
    MeasuredThroughput,
    NodeThroughput,
    RankExit,
)
from workers.models.relocation import JobMigration, MigrationReason, MigrationStatus

__all__ = [
    "REFERENCE_CHIP",
    "AgentCommand",
    "Allocation",
    "ChipType",
    "Dataset",
    "EnrollmentToken",
    "Job",
    "JobCheckpoint",
    "JobEval",
    "JobEvent",
    "JobLogLine",
    "JobMigration",
    "JobMetric",
    "MeasuredThroughput",
    "NodeThroughput",
    "MigrationReason",
    "MigrationStatus",
    "Node",
    "Pool",
    "RankExit",
    "UploadedModel",
    "new_node_token",
]
