"""Credentials for the embedded S3's own servers (SeaweedFS's security.toml, given as WEED_* variables).

Besides the S3 API (which requires requests signed with our key pair), `weed mini` runs a master, a volume
server, a filer and an admin server, each on an HTTP and a gRPC port. Without credentials anyone who can
reach them reads every object through the filer, and one unauthenticated GET to the master
(`/col/delete?collection=<bucket>`) deletes the whole bucket. So each start makes:

- a private CA and one certificate it signs (valid for server and client use), with which every gRPC
  port and the master's, volume server's and filer's HTTP ports require mutual TLS: a client without
  the certificate is refused in the handshake, and weed's own components present it to each other;
- JWT signing keys for volume and filer reads and writes (a second lock on the same doors).

The files live in `<data dir>/s3-tls/` (0600 in a 0700 folder) and are made afresh at every start, as
are the keys, which only the weed process gets (in its environment, never on its command line).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from pathlib import Path

# weed's components, each with a gRPC server (and a client side that presents the same certificate).
_GRPC = ("MASTER", "VOLUME", "FILER", "S3", "ADMIN", "CLIENT", "WORKER", "MSG_BROKER", "MQ")
_HTTPS = ("MASTER", "VOLUME", "FILER", "CLIENT")  # the S3 API itself stays plain HTTP with signed requests
_JWT = ("JWT_SIGNING_KEY", "JWT_SIGNING_READ_KEY", "JWT_FILER_SIGNING_KEY", "JWT_FILER_SIGNING_READ_KEY")
VALID_FOR = datetime.timedelta(days=3650)  # remade at every start anyway


def weed_security_environment(folder: Path, ip: str) -> dict[str, str]:
    """The WEED_* variables that lock weed's internal servers, with the certificate files written to `folder`."""
    ca, cert, key = write_certificates(folder, ip)
    env = {f"WEED_{name}": secrets.token_urlsafe(32) for name in _JWT}
    env["WEED_GRPC_CA"] = str(ca)
    for component in _GRPC:
        env[f"WEED_GRPC_{component}_CERT"], env[f"WEED_GRPC_{component}_KEY"] = str(cert), str(key)
    for component in _HTTPS:
        env[f"WEED_HTTPS_{component}_CERT"], env[f"WEED_HTTPS_{component}_KEY"] = str(cert), str(key)
        env[f"WEED_HTTPS_{component}_CA"] = str(ca)  # a server with a CA requires a client certificate from it
    env["WEED_HTTPS_CLIENT_ENABLED"] = "true"
    return env


def write_certificates(folder: Path, ip: str) -> tuple[Path, Path, Path]:
    """(CA certificate, certificate, private key) as PEM files in `folder`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("starverse-s3-ca", ca_key.public_key(), ca_key, None, ip)
    cert = _certificate("starverse-s3", key.public_key(), ca_key, ca, ip)
    pem = serialization.Encoding.PEM
    private = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    for path, data in zip(paths, (ca.public_bytes(pem), cert.public_bytes(pem), private), strict=True):
        _write_private(path, data)
    return paths


def _certificate(name: str, public_key, signer, issuer, ip: str):
    """A CA certificate (no issuer: self-signed) or one the CA signs for weed's servers and clients."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=0 if issuer is None else None), True)
    )
    if issuer is not None:
        names = [x509.DNSName("localhost"), _subject_name(ip)]
        usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), False)
    return builder.sign(signer, hashes.SHA256())


def _subject_name(host: str):
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
