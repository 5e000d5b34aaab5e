"""The launcher finds the project it starts: `make run` runs manage.py from the repository root."""

from launcher import platform


def test_the_launcher_runs_manage_py_from_the_repository_root():
    assert (platform.REPO / "manage.py").is_file()
    assert (platform.REPO / "launcher" / "platform.py").is_file()
