"""Local mode keeps what it writes private: the data folder and everything in it is its user's alone.

The data folder holds the databases, the generated secret key, datasets, checkpoints, run folders
and the stores' logs. The launcher sets a 0077 umask, which its children (web, Celery, the agents
and their training ranks) inherit, so every file they create is 0600 and every folder 0700.
Mail (sign-up confirmations, password-reset links) goes to the terminal, or, when the output is
not a terminal (`make run > run.log`), to private files instead of that world-readable log.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import TextIO

PRIVATE_UMASK = 0o077
FILE_MAIL = "django.core.mail.backends.filebased.EmailBackend"


def make_private(data_dir: Path) -> None:
    """From now on this process and its children create private files; the data folder is 0700."""
    os.umask(PRIVATE_UMASK)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    data_dir.chmod(0o700)


def mail_to_private_files(
    data_dir: Path, stdout: TextIO = sys.stdout, environ: MutableMapping[str, str] = os.environ
) -> Path | None:
    """Unless mail is configured or output is a terminal, send it to files under <data dir>/mail/; that folder."""
    if environ.get("EMAIL_BACKEND") or environ.get("EMAIL_URL") or environ.get("EMAIL_URL_FILE") or stdout.isatty():
        return None
    folder = data_dir / "mail"
    environ["EMAIL_BACKEND"] = FILE_MAIL
    environ["EMAIL_FILE_PATH"] = str(folder)
    return folder
