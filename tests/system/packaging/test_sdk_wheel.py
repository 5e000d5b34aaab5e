"""The SDK's wheel (sdk/pyproject.toml): it ships the `py.typed` marker (PEP 561) and every module, the
`starverse` console script, and the version `starverse --version` reads from its metadata."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parents[3] / "sdk"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """Built from a copy of sdk/ (setuptools writes build/ beside the sources), with the installed setuptools."""
    scratch = tmp_path_factory.mktemp("sdk-wheel")
    source = scratch / "sdk"
    shutil.copytree(SDK, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", scratch, source]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    (built,) = scratch.glob("starverse-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_the_wheel_ships_py_typed_and_every_module(wheel):
    names = set(wheel.namelist())

    assert "starverse/py.typed" in names
    modules = {str(path.relative_to(SDK)) for path in (SDK / "starverse").rglob("*.py")}
    assert modules <= names


def test_the_wheel_declares_the_console_script_and_its_version(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]

    assert "starverse = starverse.cli:main" in wheel.read(entry_points).decode()
    project = (SDK / "pyproject.toml").read_text()
    version = next(line.split('"')[1] for line in project.splitlines() if line.startswith("version ="))
    assert f"Version: {version}\n" in wheel.read(metadata).decode()
