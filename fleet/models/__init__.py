"""The shared data model: chip types, pools and nodes; jobs and their allocations; uploaded datasets and
models. The control app (workers) acts on these rows; billing and the market read them. Each keeps the
table it had when it lived in workers (`db_table`), so moving it here moved no data."""

from fleet.models.chips import REFERENCE_CHIP, ChipType, Node, Pool
from fleet.models.deployments import Deployment, DeploymentStatus, ServedRequest
from fleet.models.jobs import Allocation, AllocationQuerySet, Job
from fleet.models.uploads import Dataset, UploadedModel

__all__ = [
    "REFERENCE_CHIP",
    "Allocation",
    "AllocationQuerySet",
    "ChipType",
    "Dataset",
    "Deployment",
    "DeploymentStatus",
    "Job",
    "Node",
    "Pool",
    "ServedRequest",
    "UploadedModel",
]
