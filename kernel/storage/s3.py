"""S3-compatible object storage through boto3 (AWS, SeaweedFS, MinIO, R2, ...).

The endpoint and credentials come from boto3's standard sources (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, or its config files); the URL names only the bucket and prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

import boto3.session
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kernel.storage.base import ObjectMissing, StorageError, Store, StoredObject, check_key, join

_TRANSFER = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20, max_concurrency=4)
PART_BYTES, MAX_PARTS = 64 << 20, 10_000  # a granted multipart upload's parts (S3 allows 10,000 of 5 MiB-5 GiB)
_GRANTED = {"GET": "get_object", "PUT": "put_object"}
_MISSING = {"404", "NoSuchKey", "NotFound"}


_CLIENT_CONFIG = Config(
    connect_timeout=5,
    read_timeout=60,
    retries={"max_attempts": 5, "mode": "standard"},
    signature_version="s3v4",
    s3={"addressing_style": "path"},
)


class S3Store(Store):
    """`public_endpoint`: where users' browsers reach the store, when not at the platform's own endpoint
    (an internal address, say); presigned download URLs are signed for it."""

    def __init__(self, bucket: str, prefix: str = "", client=None, public_endpoint: str | None = None) -> None:
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        # A session of its own: boto3's default session is not safe to share between threads creating clients.
        self.client = client or boto3.session.Session().client("s3", config=_CLIENT_CONFIG)
        self.signer = self.client
        if public_endpoint:
            credentials = self.client._request_signer._credentials
            self.signer = boto3.session.Session().client(
                "s3",
                endpoint_url=public_endpoint,
                region_name=self.client.meta.region_name,
                aws_access_key_id=credentials.access_key if credentials else None,
                aws_secret_access_key=credentials.secret_key if credentials else None,
                aws_session_token=credentials.token if credentials else None,
                config=_CLIENT_CONFIG,
            )

    def _key(self, key: str) -> str:
        return join(self.prefix, check_key(key))

    def _call(self, what: str, key: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise ObjectMissing(f"no object {key!r} in {self.url}") from None
            raise StorageError(f"{what} {key!r} in {self.url} failed: {code or exc}") from None
        except BotoCoreError as exc:
            raise StorageError(f"{what} {key!r} in {self.url} failed: {exc}") from None

    def put_file(self, key: str, path: Path) -> None:
        self._call("upload", key, self.client.upload_file, str(path), self.bucket, self._key(key), Config=_TRANSFER)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call("upload", key, self.client.put_object, Bucket=self.bucket, Key=self._key(key), Body=data)

    def get_file(self, key: str, dest: Path) -> None:
        self._call("download", key, self.client.download_file, self.bucket, self._key(key), str(dest), Config=_TRANSFER)

    def get_bytes(self, key: str) -> bytes:
        answer = self._call("download", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key))
        return answer["Body"].read()

    def open(self, key: str) -> BinaryIO:
        answer = self._call("download", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key))
        return answer["Body"]

    def exists(self, key: str) -> bool:
        try:
            self._call("look up", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        except ObjectMissing:
            return False
        return True

    def list(self, prefix: str) -> Iterator[StoredObject]:
        full = join(self.prefix, check_key(prefix)) + "/" if prefix else (self.prefix + "/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
        try:
            for page in pages:
                for item in page.get("Contents", []):
                    yield StoredObject(item["Key"][strip:], item["Size"], item["LastModified"].timestamp())
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"listing {prefix!r} in {self.url} failed: {exc}") from None

    def delete(self, key: str) -> None:
        self._call("delete", key, self.client.delete_object, Bucket=self.bucket, Key=self._key(key))

    def delete_prefix(self, prefix: str) -> int:
        keys = [self._key(item.key) for item in self.list(check_key(prefix))]  # never the whole store
        for start in range(0, len(keys), 1000):
            batch = [{"Key": key} for key in keys[start : start + 1000]]
            delete = self.client.delete_objects
            answer = self._call("delete", prefix, delete, Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            if failed := (answer or {}).get("Errors"):
                first = failed[0]
                raise StorageError(
                    f"deleting under {prefix!r} in {self.url}: {len(failed)} object(s) not deleted, "
                    f"e.g. {first.get('Key')!r}: {first.get('Code')} {first.get('Message', '')}".rstrip()
                )
        return len(keys)

    multipart = True

    def grant_url(self, key: str, method: str, expires_s: int) -> str:
        """Signed for the endpoint the platform reaches the store at, which compute hosts must reach too."""
        params = {"Bucket": self.bucket, "Key": self._key(key)}
        sign = self.client.generate_presigned_url
        return self._call("sign", key, sign, _GRANTED[method], Params=params, ExpiresIn=expires_s)

    def grant_upload(self, key: str, size: int, expires_s: int) -> dict:
        """A multipart upload of `size` bytes begun for a host: its id, part size and one PUT URL per part (an
        object past S3's 5 GiB limit for one PUT, e.g. a large model's DeepSpeed states, needs one)."""
        part_size = max(PART_BYTES, -(-size // MAX_PARTS))
        start = self.client.create_multipart_upload
        upload_id = self._call("start upload", key, start, Bucket=self.bucket, Key=self._key(key))["UploadId"]
        sign = self.client.generate_presigned_url
        urls = [
            self._call("sign", key, sign, "upload_part", Params=self._part(key, upload_id, n), ExpiresIn=expires_s)
            for n in range(1, max(1, -(-size // part_size)) + 1)
        ]
        return {"upload_id": upload_id, "part_size": part_size, "urls": urls}

    def _part(self, key: str, upload_id: str, number: int) -> dict:
        return {"Bucket": self.bucket, "Key": self._key(key), "UploadId": upload_id, "PartNumber": number}

    def complete_upload(self, key: str, upload_id: str, etags: list[str]) -> None:
        """The object exists from now: the parts the host uploaded, in order."""
        parts = {"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, 1)]}
        finish = self.client.complete_multipart_upload
        self._call(
            "finish upload",
            key,
            finish,
            Bucket=self.bucket,
            Key=self._key(key),
            UploadId=upload_id,
            MultipartUpload=parts,
        )

    def abort_upload(self, key: str, upload_id: str) -> None:
        abort = self.client.abort_multipart_upload
        self._call("abort upload", key, abort, Bucket=self.bucket, Key=self._key(key), UploadId=upload_id)

    def presigned_url(self, key: str, filename: str, expires_s: int = 900) -> str | None:
        params = {
            "Bucket": self.bucket,
            "Key": self._key(key),
            "ResponseContentDisposition": content_disposition(filename),
        }
        sign = self.signer.generate_presigned_url
        return self._call("sign", key, sign, "get_object", Params=params, ExpiresIn=expires_s)

    def ping(self) -> None:
        try:
            self._call("reach bucket", self.bucket, self.client.head_bucket, Bucket=self.bucket)
        except ObjectMissing:
            raise StorageError(f"there is no bucket {self.bucket!r} at {self.client.meta.endpoint_url}") from None

    def describe(self) -> str:
        return f"{self.url} at {self.client.meta.endpoint_url}"


def content_disposition(filename: str) -> str:
    """`attachment` with the name in plain ASCII (quotes, backslashes, controls and other characters as '_')
    and, when that changed it, RFC 6266's UTF-8 form beside it."""
    plain = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in filename) or "download"
    header = f'attachment; filename="{plain}"'
    return header if plain == filename else f"{header}; filename*=UTF-8''{quote(filename, safe='')}"
