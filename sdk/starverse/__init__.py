"""Starverse SDK: quote and train on mixed accelerators, upload your own models, bid for spot chips, from Python
or the CLI."""

from starverse.client import Client, create_token, upload_model
from starverse.config import Config, load_config, save_config
from starverse.errors import (
    APIConnectionError,
    APIError,
    AuthError,
    BudgetTooLow,
    ConfigError,
    Conflict,
    IdempotencyConflict,
    InsufficientCredit,
    JobFailed,
    ModelDoesNotFit,
    MoveNotConfirmed,
    NoCapacity,
    NotFound,
    PermissionDenied,
    RateLimited,
    ServerError,
    StarverseError,
    TooManyQueued,
    TwoFactorRequired,
    ValidationError,
)
from starverse.objects import Checkpoint, Checkpoints, Dataset, Event, Hyperparameters, Job
from starverse.plans import Quote
from starverse.training import Cluster, MetaParallel, ModelConfig, Plan, Run, Trainer, accelerate
from starverse.version import VERSION

__version__ = VERSION

__all__ = [
    "APIConnectionError",
    "APIError",
    "AuthError",
    "BudgetTooLow",
    "Checkpoint",
    "Checkpoints",
    "Client",
    "Cluster",
    "Config",
    "ConfigError",
    "Conflict",
    "Dataset",
    "Event",
    "Hyperparameters",
    "IdempotencyConflict",
    "MoveNotConfirmed",
    "InsufficientCredit",
    "Job",
    "JobFailed",
    "MetaParallel",
    "ModelConfig",
    "ModelDoesNotFit",
    "NoCapacity",
    "TooManyQueued",
    "NotFound",
    "PermissionDenied",
    "Plan",
    "Quote",
    "RateLimited",
    "Run",
    "ServerError",
    "StarverseError",
    "Trainer",
    "TwoFactorRequired",
    "ValidationError",
    "accelerate",
    "create_token",
    "load_config",
    "save_config",
    "upload_model",
]
