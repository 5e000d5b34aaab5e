"""Starverse SDK: quote and train on mixed accelerators, upload your own models, bid for spot chips, serve a
trained model behind an OpenAI-compatible endpoint, from Python or the CLI."""

from starverse.chat import ChatReply, ChatStream, Usage
from starverse.client import Client, create_token, upload_model
from starverse.config import Config, load_config, save_config
from starverse.errors import (
    APIConnectionError,
    APIError,
    AuthError,
    BudgetTooLow,
    ConfigError,
    Conflict,
    DeploymentFailed,
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
from starverse.serving import Deployment, Replica, deploy, deployments
from starverse.training import Cluster, MetaParallel, ModelConfig, Plan, Run, Trainer, accelerate
from starverse.version import VERSION

__version__ = VERSION

__all__ = [
    "APIConnectionError",
    "APIError",
    "AuthError",
    "BudgetTooLow",
    "ChatReply",
    "ChatStream",
    "Checkpoint",
    "Checkpoints",
    "Client",
    "Cluster",
    "Config",
    "ConfigError",
    "Conflict",
    "Dataset",
    "Deployment",
    "DeploymentFailed",
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
    "Replica",
    "Run",
    "ServerError",
    "StarverseError",
    "Trainer",
    "TwoFactorRequired",
    "Usage",
    "ValidationError",
    "accelerate",
    "create_token",
    "deploy",
    "deployments",
    "load_config",
    "save_config",
    "upload_model",
]
