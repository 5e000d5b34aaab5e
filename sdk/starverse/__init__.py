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
from starverse.training import Cluster, MetaParallel, ModelConfig, Plan, Run, Trainer, accelerate

__version__ = "0.1.0"

__all__ = [
    "APIConnectionError",
    "APIError",
    "AuthError",
    "BudgetTooLow",
    "Client",
    "Cluster",
    "Config",
    "ConfigError",
    "IdempotencyConflict",
    "MoveNotConfirmed",
    "InsufficientCredit",
    "JobFailed",
    "MetaParallel",
    "ModelConfig",
    "ModelDoesNotFit",
    "NoCapacity",
    "TooManyQueued",
    "NotFound",
    "PermissionDenied",
    "Plan",
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
