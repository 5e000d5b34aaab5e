"""The `starverse` command line: tables for people, `--json` for scripts, exit codes scripts can rely on.

Exit codes:
  0    success
  1    the platform refused or failed (API error, connection error)
  2    bad usage or configuration (missing URL or token, unknown option, bad input)
  3    authentication (wrong, revoked, expired or read-only token)
  4    insufficient credit
  5    the job ended without succeeding (failed, cancelled, stopped for credit)
  130  interrupted (Ctrl-C)

The commands, by group: account.py (login, chips, balance, usage), jobs.py (quote, run, jobs, job,
logs, cancel, continue; their training options in training_options.py), bids.py (bid ..., bid-advice),
models.py (model ...), deployments.py (deploy, deployments ..., chat), datasets.py (datasets ...),
checkpoints.py (checkpoints ..., tensorboard); common.py holds what they share (and --version,
--install-completion, --show-completion).
"""

from __future__ import annotations

import typer

from starverse import errors

# Each command module registers its commands on the app as it is imported, and `starverse --help` lists
# them in that order: account and jobs first, then bids and models.
from starverse.cli import account, jobs  # isort: split

from starverse.cli import bids, models  # isort: split

from starverse.cli import deployments  # isort: split

from starverse.cli import checkpoints, datasets
from starverse.cli.common import EXIT_API, EXIT_AUTH, EXIT_CREDIT, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, app, err
from starverse.config import config_path

COMMAND_GROUPS = (account, jobs, bids, models, deployments, datasets, checkpoints)


def exit_code(error: BaseException) -> int:
    if isinstance(error, errors.InsufficientCredit):
        return EXIT_CREDIT
    if isinstance(error, errors.AuthError):
        return EXIT_AUTH
    if isinstance(error, errors.ConfigError):
        return EXIT_USAGE
    return EXIT_API


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and in a console script, exits with) a documented exit code."""
    try:
        result = app(args=argv, standalone_mode=False, prog_name="starverse")
    except (typer.Abort, KeyboardInterrupt):
        err.print("Interrupted.")
        return EXIT_INTERRUPTED
    except typer.Exit as done:
        return done.exit_code
    except SystemExit as done:  # --show-completion and --install-completion exit when done
        if done.code is None or isinstance(done.code, int):
            return done.code or EXIT_OK
        err.print(str(done.code), markup=False)
        return EXIT_API
    except errors.StarverseError as error:
        err.print(f"Error ({type(error).__name__}): {error}", markup=False)
        if isinstance(error, errors.AuthError) and not isinstance(error, errors.PermissionDenied):
            err.print(f"Check the token, or run `starverse login` again (config: {config_path()}).", markup=False)
        return exit_code(error)
    except Exception as error:
        if not is_click_error(error):
            raise
        error.show()  # usage errors: unknown option, missing argument, bad value
        return EXIT_USAGE if error.exit_code == EXIT_USAGE else EXIT_API
    return result if isinstance(result, int) else EXIT_OK


def is_click_error(error: Exception) -> bool:
    """Click's (or typer's vendored click's) own errors, which know how to show themselves."""
    return callable(getattr(error, "show", None)) and isinstance(getattr(error, "exit_code", None), int)


__all__ = ["app", "main"]
