"""`make run`'s web server: gunicorn's processes and threads come from WEB_WORKERS and WEB_THREADS."""

import pytest

from launcher.processes import platform_processes
from launcher.stores import StoreError


def web_line(tmp_path, **env) -> str:
    return platform_processes({"STARVERSE_DATA_DIR": str(tmp_path), "PORT": "8100", **env})["web"]


def test_the_web_runs_two_workers_of_eight_threads_by_default(tmp_path):
    line = web_line(tmp_path)
    assert "gunicorn portal.wsgi:application --bind 127.0.0.1:8100" in line
    assert "--workers 2 --worker-class gthread --threads 8" in line
    assert "--preload" in line


def test_workers_and_threads_are_read_from_the_environment(tmp_path):
    line = web_line(tmp_path, WEB_WORKERS="3", WEB_THREADS=" 4 ")
    assert "--workers 3 --worker-class gthread --threads 4" in line


@pytest.mark.parametrize(
    ("name", "value", "what"),
    [
        ("WEB_THREADS", "0", "threads"),
        ("WEB_THREADS", "many", "threads"),
        ("WEB_WORKERS", "-1", "processes"),
        ("WEB_WORKERS", "²", "processes"),  # a digit to str.isdigit, not to int()
    ],
)
def test_a_count_that_is_not_a_positive_whole_number_is_refused_by_name(tmp_path, name, value, what):
    with pytest.raises(StoreError, match=rf"{name}='{value}' is not a number of {what}"):
        web_line(tmp_path, **{name: value})


def test_agent_workers_are_checked_the_same_way(tmp_path):
    with pytest.raises(StoreError, match=r"AGENT_WORKERS='2.5' is not a number of processes"):
        web_line(tmp_path, AGENT_WORKERS="2.5")
