"""The control app's own rows: agent commands and enrollment, checkpoints, moves, and what jobs report.
The shared rows it acts on (jobs, nodes, ...) live in fleet.models."""

from workers.models.agents import AgentCommand, EnrollmentToken, new_node_token
from workers.models.checkpoints import JobCheckpoint
from workers.models.relocation import JobMigration
from workers.models.reports import (
    BridgeMeasurement,
    JobEval,
    JobEvent,
    JobLogLine,
    JobMetric,
    MeasuredThroughput,
    NodeThroughput,
    RankExit,
)

__all__ = [
    "AgentCommand",
    "BridgeMeasurement",
    "EnrollmentToken",
    "JobCheckpoint",
    "JobEval",
    "JobEvent",
    "JobLogLine",
    "JobMetric",
    "JobMigration",
    "MeasuredThroughput",
    "NodeThroughput",
    "RankExit",
    "new_node_token",
]
