"""Typed errors: what went wrong, in words a user can act on, with the API's field errors attached."""

from __future__ import annotations

from typing import Any


class StarverseError(Exception):
    """Base of every error the SDK raises."""

    def __init__(self, message: str, *, status: int | None = None, errors: dict | None = None, body: Any = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.errors = errors or {}
        self.body = body

    @property
    def code(self) -> str | None:
        """The API's machine-readable code (`checkpoint_in_use`, `insufficient_credit`...), when it gave one."""
        return self.body.get("code") if isinstance(self.body, dict) else None

    @property
    def fields(self) -> dict[str, list[str]]:
        """The field errors by dotted path: {"hyperparameters.learning_rate": ["Ensure this value..."]}."""
        return flat_errors(self.errors)

    @property
    def field(self) -> str | None:
        """The first field the API named, as a dotted path (`hyperparameters.learning_rate`); None if none."""
        return next(iter(self.fields), None)

    def __str__(self) -> str:
        if not self.errors:
            return self.message
        lines = [self.message]
        for field, messages in self.fields.items():
            lines += [f"  {field}: {message}" for message in messages]
        return "\n".join(lines)


class ConfigError(StarverseError):
    """No URL or API key, or a config file that can't be read."""


class APIConnectionError(StarverseError):
    """The platform could not be reached (after retries)."""


class APIError(StarverseError):
    """The platform answered with an error."""


class AuthError(APIError):
    """401: no, a wrong, a revoked or an expired API token."""


class TwoFactorRequired(AuthError):
    """401 `two_factor_required`: the account uses two-factor; send the authenticator app's code as `otp`."""


class PermissionDenied(AuthError):
    """403: the token may not do this (e.g. a read-only token on a write)."""


class NotFound(APIError):
    """404: no such object among yours."""


class ValidationError(APIError):
    """400: bad input; `errors` maps each field to its messages."""


class InsufficientCredit(ValidationError):
    """Your balance does not cover the hold a launch needs; top up or choose a cheaper plan."""


class BudgetTooLow(ValidationError):
    """Plans exist, but none within the hourly (or total) budget."""


class NoCapacity(ValidationError):
    """No chips of the kinds asked for: none free now, or (the message says) none the fleet could ever offer."""


class TooManyQueued(ValidationError):
    """You already have as many jobs waiting to be placed as the platform allows; cancel one or wait."""


class ModelDoesNotFit(ValidationError):
    """The model fits no chip the platform has, even fully sharded."""


class Conflict(APIError):
    """409: not now, given the object's state; `code` says why (e.g. `checkpoint_in_use`, `job_not_finished`)."""


class MoveNotConfirmed(Conflict):
    """409: the bid change would move a running job (`move` says where); send it again with confirm."""

    @property
    def move(self) -> dict:
        return self.body.get("move", {}) if isinstance(self.body, dict) else {}


class IdempotencyConflict(APIError):
    """422: the Idempotency-Key was already used for a different request."""


class RateLimited(APIError):
    """429: too many requests; `retry_after` says how long to wait."""

    retry_after: float | None = None


class ServerError(APIError):
    """5xx: the platform failed; the request may be retried (after `retry_after` seconds, when it said)."""

    retry_after: float | None = None


class DeploymentFailed(StarverseError):
    """A deployment failed (its replicas kept failing to start) or was stopped while it was awaited."""

    def __init__(self, message: str, deployment=None):
        super().__init__(message)
        self.deployment = deployment


class JobFailed(StarverseError):
    """A run ended without succeeding (failed, cancelled, or stopped for credit)."""

    def __init__(self, message: str, run=None):
        super().__init__(message)
        self.run = run


CODE_ERRORS: dict[str, type[ValidationError]] = {
    "insufficient_credit": InsufficientCredit,
    "budget_too_low": BudgetTooLow,
    "no_capacity": NoCapacity,
    "model_does_not_fit": ModelDoesNotFit,
    "too_many_queued": TooManyQueued,
}
# Servers without `code` in their errors: the field tells the kind.
FIELD_ERRORS: dict[str, type[ValidationError]] = {
    "balance": InsufficientCredit,
}
STATUS_ERRORS: dict[int, type[APIError]] = {
    401: AuthError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    422: IdempotencyConflict,
    429: RateLimited,
}


def error_for(status: int, body: Any, retry_after: float | None = None) -> APIError:
    """The typed error for an error answer of the API ({"detail", "errors", "code"})."""
    body_dict = body if isinstance(body, dict) else {}
    detail = str(body_dict.get("detail") or (body if isinstance(body, str) and body else f"HTTP {status}"))
    errors = body_dict.get("errors") if isinstance(body_dict.get("errors"), dict) else {}
    if status == 400:
        kind = CODE_ERRORS.get(body_dict.get("code", "")) or next(
            (FIELD_ERRORS[field] for field in errors if field in FIELD_ERRORS), ValidationError
        )
        message = first_message(errors) if kind is not ValidationError else detail
        return kind(message or detail, status=status, errors=errors, body=body)
    if status == 401 and body_dict.get("code") == "two_factor_required":
        return TwoFactorRequired(detail, status=status, errors=errors, body=body)
    if status == 409 and body_dict.get("code") == "confirm_required":
        return MoveNotConfirmed(detail, status=status, errors=errors, body=body)
    if status == 422 and errors and "Idempotency-Key" not in detail:
        return ValidationError(detail, status=status, errors=errors, body=body)
    kind = STATUS_ERRORS.get(status) or (ServerError if status >= 500 else APIError)
    error = kind(detail, status=status, errors=errors, body=body)
    if isinstance(error, RateLimited | ServerError):
        error.retry_after = retry_after
    return error


def flat_errors(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """Nested field errors ({"hyperparameters": {"learning_rate": [...]}}) by dotted path."""
    if isinstance(errors, dict):
        flat: dict[str, list[str]] = {}
        for key, value in errors.items():
            flat.update(flat_errors(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(errors, list) and any(isinstance(item, dict) for item in errors):  # a list of objects
        flat = {}
        for index, item in enumerate(errors):
            flat.update(flat_errors(item, f"{prefix}[{index}]"))
        return flat
    messages = errors if isinstance(errors, list) else [errors]
    return {prefix or "non_field_errors": [str(message) for message in messages]} if messages else {}


def first_message(errors: dict) -> str:
    for messages in errors.values():
        if isinstance(messages, list) and messages:
            return str(messages[0])
        if isinstance(messages, str):
            return messages
    return ""
