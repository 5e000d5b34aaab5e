"""`make run`'s object store (launcher/platform.py start_storage): the data dir's folder by default,
embedded S3 (SeaweedFS) with STARVERSE_STORAGE=embedded-s3, a set STORAGE_URL kept; what it chose is
exported to every child (web, Celery, the demo agents and their ranks)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from launcher import s3
from launcher.platform import start_storage
from launcher.processes import platform_processes
from launcher.s3 import EmbeddedS3
from launcher.stores import StoreError, free_port

REPO = Path(__file__).resolve().parents[2]


def test_by_default_the_store_is_a_folder_of_the_data_dir(tmp_path):
    environ: dict[str, str] = {}
    started: list = []

    start_storage(tmp_path, started, environ)

    assert environ == {"STORAGE_URL": f"file://{tmp_path / 'storage'}"} and started == []


def test_a_storage_url_that_is_set_is_kept(tmp_path):
    given = {"STORAGE_URL": "s3://their-bucket/starverse", "AWS_ENDPOINT_URL": "https://s3.example.com"}
    environ, started = dict(given), []

    start_storage(tmp_path, started, environ)

    assert environ == given and started == []


def test_embedded_s3_is_started_with_its_data_in_the_data_dir_and_exported(tmp_path):
    port = free_port()
    environ = {"STARVERSE_STORAGE": "embedded-s3", "STARVERSE_S3_PORT": str(port)}
    started: list = []
    try:
        start_storage(tmp_path, started, environ)

        (server,) = started
        assert isinstance(server, EmbeddedS3) and server.running and server.s3_dir == tmp_path.resolve() / "s3"
        assert environ["STORAGE_URL"] == "s3://starverse/starverse"
        assert environ["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=environ["AWS_ENDPOINT_URL"],
            aws_access_key_id=environ["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=environ["AWS_SECRET_ACCESS_KEY"],
            region_name=environ["AWS_REGION"],
        )
        client.put_object(Bucket="starverse", Key="starverse/probe", Body=b"kept")
        server.stop()
        server.start()  # restarted on the same port, with its data
        assert client.get_object(Bucket="starverse", Key="starverse/probe")["Body"].read() == b"kept"
    finally:
        for server in started:
            server.stop()


def test_a_child_sees_the_exported_store(tmp_path):
    """Children inherit the launcher's environment: a demo agent's ranks open the same store."""
    environ: dict[str, str] = {}
    start_storage(tmp_path, [], environ)
    code = "from kernel.storage import store_from_environment as s; print(s().url)"

    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env={**os.environ, **environ}, capture_output=True, text=True
    )

    assert done.stdout.strip() == f"file://{tmp_path / 'storage'}", done.stderr


def test_embedded_s3_and_a_storage_url_together_are_refused(tmp_path):
    environ = {"STARVERSE_STORAGE": "embedded-s3", "STORAGE_URL": "s3://mine/x"}

    with pytest.raises(StoreError, match="Both STARVERSE_STORAGE=embedded-s3 and STORAGE_URL=s3://mine/x"):
        start_storage(tmp_path, [], environ)


def test_an_unknown_storage_choice_names_the_choices(tmp_path):
    with pytest.raises(StoreError, match="'minio' is not a storage choice: use directory .* or embedded-s3"):
        start_storage(tmp_path, [], {"STARVERSE_STORAGE": "minio"})


def test_a_taken_s3_port_names_the_variable(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(StoreError, match=rf"Port {port} .*STARVERSE_S3_PORT"):
            start_storage(tmp_path, [], {"STARVERSE_STORAGE": "embedded-s3", "STARVERSE_S3_PORT": str(port)})


def test_weeds_own_servers_get_ports_apart_from_each_other_and_from_the_s3_api():
    s3_port = free_port()
    ports = s3._server_ports("127.0.0.1", s3_port)

    every = ports + [port + 10_000 for port in ports]  # each server's gRPC port too
    assert len(ports) == len(s3._SERVERS) and len(set(every)) == len(every)
    assert not set(every) & {s3_port, s3_port + 10_000}
    # Below the kernel's ephemeral ports and the training ranks' rendezvous ports (29500 and up).
    assert all(port >= 10_000 and port + 10_000 < 29_500 for port in ports)


def test_a_server_port_taken_before_weed_binds_it_is_retried_on_new_ports(tmp_path, monkeypatch):
    """A port taken after it was chosen makes weed exit (its own check, or the bind); the start tries
    new ports. Here the master's port is held by a listening socket on the first try."""
    server = EmbeddedS3(tmp_path, free_port())
    chosen: list[list[int]] = []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]

        def ports_with_a_taken_one_first(ip, s3_port):
            ports = real_ports(ip, s3_port)
            chosen.append([taken, *ports[1:]] if not chosen else ports)  # the master's port, first time
            return chosen[-1]

        real_ports = s3._server_ports
        monkeypatch.setattr(s3, "_server_ports", ports_with_a_taken_one_first)
        try:
            server.start()
            assert server.running and len(chosen) == 2
            assert s3.PORT_TAKEN.search(server.log_path.read_text(errors="replace"))
        finally:
            server.stop()


def test_a_start_that_fails_for_another_reason_is_not_retried(tmp_path, monkeypatch):
    server = EmbeddedS3(tmp_path, free_port())
    calls = []
    monkeypatch.setattr(server, "_argv", lambda ports: calls.append(ports) or [sys.executable, "-c", "exit(3)"])

    with pytest.raises(StoreError, match="exited with code 3 while starting"):
        server.start()
    assert len(calls) == 1


def test_make_runs_demo_agents_get_none_of_the_stores_variables(tmp_path):
    """The platform's processes get STORAGE_URL and the AWS_* keys; the demo agents (hosts, to the platform)
    are started without them (#28): their ranks reach storage through the grants in their launches."""
    entry = {"token_file": str(tmp_path / "t"), "hostname": "demo-a", "chip": "rtx-4090", "chips": 1, "spot": False}
    (tmp_path / "demo-fleet.json").write_text(json.dumps([entry]))
    store = {"STORAGE_URL": "s3://starverse/starverse", "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}
    env = {"STARVERSE_DATA_DIR": str(tmp_path), **store}

    command = platform_processes(env)["demo-a"]
    python_of_the_agent = command.split(" -m hosts.agent ")[0]
    probe = f"{python_of_the_agent} -c 'import json, os; print(json.dumps(sorted(os.environ)))'"
    seen = json.loads(
        subprocess.run(probe, shell=True, env={**os.environ, **env}, capture_output=True, check=True).stdout
    )

    assert not set(store) & set(seen)
    assert "secret" not in command
