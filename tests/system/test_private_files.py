"""What users and operators entrust to the platform stays private on disk: datasets, checkpoints, run
folders and the data folder are 0600/0700; the operator password and reset links never reach a log."""

from __future__ import annotations

import io
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client

from hosts.agent.ranks import write_launch
from hosts.runtime.local import job_launches
from launcher.private import mail_to_private_files
from portal.models import ApiToken
from tests.support.accounts import PASSWORD
from tests.support.ranks import run_job

REPO = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes_under(root: Path) -> tuple[set[int], set[int]]:
    """(modes of the files, modes of the folders) under root, root included."""
    files = {mode(p) for p in root.rglob("*") if p.is_file()}
    folders = {mode(p) for p in [root, *root.rglob("*")] if p.is_dir()}
    return files, folders


@pytest.fixture
def shared_umask():
    """The usual 022 umask, under which files would be world-readable unless made private on purpose."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.django_db
def test_an_uploaded_dataset_in_a_storage_folder_is_a_private_file_in_private_folders(
    alice, settings, tmp_path, shared_umask
):
    settings.STORAGE_URL = f"file://{tmp_path / 'storage'}"
    api = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(alice)[1]}")
    upload = SimpleUploadedFile("corpus.txt", b"one sample\nanother sample\n", content_type="text/plain")

    assert api.post("/api/v1/datasets/", {"file": upload}).status_code == 201

    files, folders = modes_under(tmp_path / "storage")
    assert files == {0o600} and folders == {0o700}
    assert len([p for p in (tmp_path / "storage").rglob("*") if p.is_file()]) == 2  # data.txt, manifest.json


def test_a_ranks_checkpoints_and_run_files_are_private(tmp_path, shared_umask):
    job = run_job(tmp_path / "job", [1], max_steps=2, checkpoint_every=1)

    files, folders = modes_under(tmp_path / "job" / "checkpoints")  # all written by the rank itself
    assert files and files == {0o600}, files
    assert folders == {0o700}, folders
    run_files = {mode(p) for p in (tmp_path / "job").rglob("*") if p.is_file()}  # launch files, logs, control
    assert run_files == {0o600}
    assert job.events(0)


def test_the_launch_file_an_agent_writes_for_a_rank_is_private(tmp_path, shared_umask):
    launch = job_launches([1], tmp_path / "run", model={}, dataset="synthetic")[0]

    path = write_launch(launch, tmp_path / "ranks" / "r0", cuda=False)

    assert mode(path) == 0o600 and mode(path.parent) == 0o700


def test_local_mode_makes_the_data_folder_and_all_it_writes_private(tmp_path):
    data = tmp_path / "data"
    script = (
        "import os, pathlib\n"
        "from launcher.platform import prepare_data_dir\n"
        "d = prepare_data_dir()\n"
        "(d / 'log.txt').write_text('x')\n"
        "(d / 'runs' / 'job-1').mkdir(parents=True)\n"
        "print(os.environ.get('EMAIL_BACKEND'), os.environ.get('EMAIL_FILE_PATH'))\n"
    )
    env = {**os.environ, "STARVERSE_DATA_DIR": str(data)}
    env.pop("EMAIL_BACKEND", None)

    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert modes_under(data) == ({0o600}, {0o700})
    assert done.stdout.split()[-2:] == ["django.core.mail.backends.filebased.EmailBackend", str(data / "mail")]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_mail_goes_to_the_terminal_when_there_is_one(tmp_path):
    environ: dict[str, str] = {}

    assert mail_to_private_files(tmp_path, Terminal(), environ) is None
    assert environ == {}


def test_mail_configured_by_the_operator_is_left_alone(tmp_path):
    environ = {"EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend"}

    assert mail_to_private_files(tmp_path, io.StringIO(), environ) is None
    assert environ == {"EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend"}


@pytest.mark.django_db
def test_a_password_reset_link_in_file_mail_is_readable_only_by_its_owner(alice, settings, tmp_path, capsys):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path / "mail")
    previous = os.umask(0o077)  # what local mode's launcher gives the web process
    try:
        Client().post("/accounts/password/reset/", {"email": "alice@example.com"})
    finally:
        os.umask(previous)

    (mail,) = (tmp_path / "mail").iterdir()
    assert mode(mail) == 0o600 and mode(tmp_path / "mail") == 0o700
    assert re.search(r"/accounts/password/reset/key/\S+", mail.read_text())
    assert "/accounts/password/reset/key/" not in capsys.readouterr().out


@pytest.mark.django_db
def test_without_a_terminal_the_operator_password_goes_to_a_private_file_not_the_output(settings, tmp_path, caplog):
    settings.DATA_DIR = tmp_path
    output = io.StringIO()

    call_command("ensure_operator", stdout=output)

    saved = (tmp_path / "operator-password.txt").read_text()
    password = re.search(r"password: (\S+)", saved)[1]
    assert mode(tmp_path / "operator-password.txt") == 0o600
    assert password not in output.getvalue() and str(tmp_path / "operator-password.txt") in output.getvalue()
    assert password not in caplog.text
    assert Client().post("/accounts/login/", {"login": "operator", "password": password}).status_code == 302


@pytest.mark.django_db
def test_on_a_terminal_the_operator_password_is_printed_and_written_nowhere(settings, tmp_path, monkeypatch):
    settings.DATA_DIR = tmp_path
    monkeypatch.setenv("STARVERSE_OPERATOR_PASSWORD", PASSWORD)
    terminal = Terminal()

    call_command("ensure_operator", stdout=terminal)

    assert f"password: {PASSWORD}" in terminal.getvalue()
    assert not (tmp_path / "operator-password.txt").exists()
