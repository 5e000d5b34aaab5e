"""The store as a compute host reaches it: through a grant, never with the store's credentials.

Hosts are third parties (docs/RELIABILITY.md, 37). The platform puts a grant in each START command
(`RankLaunch.storage_grant`): a capability for one job epoch on one node. With it a rank asks the platform
(`POST /api/v1/agent/storage/`, kernel/protocol.py section 4) for URLs that each reach one object for a few
minutes: GET for the placement's inputs (its dataset, model, the checkpoint it resumes from) and its job's
checkpoints, PUT only under its job's checkpoints. The platform refuses anything else, and stops signing once
the placement is over. The bytes go straight between the host and the store; a folder store answers
file:// URLs (one machine's store, where every process reaches the folder anyway).

URLs are asked for in batches (`expect`, called before a tree is staged or uploaded) and kept until shortly
before they expire; a URL the store refuses (expired) is asked for again once. Objects too big for one PUT
are uploaded in parts when the store splits objects (S3).
"""

from __future__ import annotations

import io
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlparse

import httpx

from kernel.protocol import STORAGE_PATH
from kernel.storage.base import ObjectMissing, StorageError, Store, StoredObject, check_key
from kernel.storage.local import write_privately

SIGN_BATCH = 500  # keys per request to the platform
URL_MARGIN_S = 60.0  # a URL is asked for again this long before it expires
MULTIPART_BYTES = 1 << 30  # bigger objects are uploaded in parts where the store can (S3 takes 5 GiB per PUT)
ATTEMPTS = 4  # tries of a request that failed on the network or with a 5xx (0.5 s, 1 s, 2 s apart)
CHUNK = 1 << 20


def http_client() -> httpx.Client:
    """What a GrantStore talks to the platform and the store through (one client per store)."""
    return httpx.Client(timeout=httpx.Timeout(30.0, read=300.0))


class GrantRefused(StorageError):
    """The platform refused to sign: a key outside the grant, or a placement that is over."""


class _Expired(Exception):
    """The store refused a URL (403): it expired, or was signed for another object."""


class _Transient(Exception):
    """The network failed or the store answered 5xx: try again."""


class GrantStore(Store):
    """Reads and writes objects with URLs the platform signs for `grant`; lists and deletes nothing."""

    def __init__(self, platform_url: str, grant: str, http: httpx.Client | None = None) -> None:
        if not platform_url:
            raise StorageError("the launch carries a storage grant but no platform URL was given to ask with")
        self.platform = platform_url.rstrip("/")
        self.url = f"grant:{self.platform}"
        self._grant = grant
        self._http = http or http_client()
        self._urls: dict[tuple[str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"the object store, through a storage grant from {self.platform}"

    # -- signing ---------------------------------------------------------------------------------------
    def expect(self, method: str, keys: list[str]) -> None:
        wanted = [key for key in keys if self._cached(method, key) is None]
        for start in range(0, len(wanted), SIGN_BATCH):
            self._sign(method, wanted[start : start + SIGN_BATCH])

    def _cached(self, method: str, key: str) -> str | None:
        with self._lock:
            url, good_until = self._urls.get((method, key), ("", 0.0))
        return url if url and time.monotonic() < good_until else None

    def _forget(self, method: str, key: str) -> None:
        with self._lock:
            self._urls.pop((method, key), None)

    def _url(self, method: str, key: str) -> str:
        return self._cached(method, key) or self._sign(method, [key])["urls"][key]

    def _sign(self, method: str, keys: list[str], sizes: dict[str, int] | None = None) -> dict:
        body = {"method": method, "keys": [check_key(key) for key in keys]}
        answer = self._ask({**body, "sizes": sizes} if sizes else body)
        good_until = time.monotonic() + float(answer.get("expires_in", 0)) - URL_MARGIN_S
        with self._lock:
            for key, url in (answer.get("urls") or {}).items():
                self._urls[(method, key)] = (url, good_until)
        return answer

    def _ask(self, body: dict) -> dict:
        """POST to the platform's storage endpoint; retried while it is unreachable or restarting."""
        what = f"{body['method']} {body.get('key') or ', '.join(body.get('keys', [])[:3])}"
        headers = {"Authorization": f"Bearer {self._grant}"}
        for attempt in range(ATTEMPTS):
            try:
                response = self._http.post(self.platform + STORAGE_PATH, json=body, headers=headers)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return response.json()
                error = f"{response.status_code} {_detail(response)}"
                if response.status_code < 500 and response.status_code != 429:
                    raise GrantRefused(f"the platform refused {what}: {error}")
            _pause(attempt)
        raise StorageError(f"the platform did not sign {what}: {error}")

    # -- one object at a time --------------------------------------------------------------------------
    def _transfer(self, method: str, key: str, do):
        """`do(url)`, with the URL signed afresh once if the store refused it, and network failures retried."""
        signed_again = False
        for attempt in range(ATTEMPTS):
            try:
                return do(self._url(method, key))
            except _Expired:
                self._forget(method, key)
                if signed_again:
                    raise StorageError(f"the store refused {method} {key} with a freshly signed URL") from None
                signed_again = True
            except _Transient as exc:
                _pause(attempt)
                error = exc
        raise StorageError(f"{method} {key} failed: {error}")

    def get_file(self, key: str, dest: Path) -> None:
        self._transfer("GET", key, lambda url: self._download(url, key, dest))

    def get_bytes(self, key: str) -> bytes:
        buffer = io.BytesIO()
        self._transfer("GET", key, lambda url: self._download(url, key, buffer))
        return buffer.getvalue()

    def open(self, key: str) -> BinaryIO:
        return io.BytesIO(self.get_bytes(key))

    def _download(self, url: str, key: str, dest: Path | io.BytesIO) -> None:
        if url.startswith("file:"):
            return _copy_local(_local_path(url), key, dest)
        try:
            with self._http.stream("GET", url) as response:
                _check(response, key)
                with _writable(dest) as out:
                    for chunk in response.iter_bytes(CHUNK):
                        out.write(chunk)
        except httpx.TransportError as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from None

    def put_bytes(self, key: str, data: bytes) -> None:
        self._transfer("PUT", key, lambda url: self._upload(url, key, lambda: iter([data]), len(data)))

    def put_file(self, key: str, path: Path) -> None:
        size = Path(path).stat().st_size
        if size > MULTIPART_BYTES:
            answer = self._sign("PUT", [key], sizes={key: size})
            if upload := (answer.get("uploads") or {}).get(key):
                return self._upload_parts(key, Path(path), upload)
        self._transfer("PUT", key, lambda url: self._upload(url, key, lambda: _chunks(path), size))

    def _upload(self, url: str, key: str, body, size: int) -> None:
        if url.startswith("file:"):
            return write_privately(_local_path(url), lambda out: _write_all(out, body()), key)
        try:
            response = self._http.put(url, content=body(), headers={"Content-Length": str(size)})
        except httpx.TransportError as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from None
        _check(response, key)

    def _upload_parts(self, key: str, path: Path, upload: dict) -> None:
        """Each part to its URL, then COMPLETE with their ETags; on any failure the upload is aborted."""
        done = {"method": "COMPLETE", "key": key, "upload_id": upload["upload_id"]}
        try:
            with open(path, "rb") as source:
                etags = [self._put_part(url, key, source.read(upload["part_size"])) for url in upload["urls"]]
            self._ask({**done, "etags": etags})
        except BaseException:
            with suppress(StorageError):  # else the store's own expiry of unfinished uploads cleans up
                self._ask({**done, "method": "ABORT"})
            raise

    def _put_part(self, url: str, key: str, data: bytes) -> str:
        for attempt in range(ATTEMPTS):
            try:
                response = self._http.put(url, content=data)
                _check(response, key)
                return response.headers["etag"]
            except (httpx.TransportError, _Transient) as exc:
                _pause(attempt)
                error = exc
            except _Expired:
                raise StorageError(f"the store refused a part of {key}: its URL expired") from None
        raise StorageError(f"uploading a part of {key} failed: {error}")

    # -- what a grant never does -------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        try:
            self.get_bytes(key)
        except ObjectMissing:
            return False
        return True

    def list(self, prefix: str) -> Iterator[StoredObject]:
        raise StorageError("a storage grant lists nothing: a host reads the trees its launch names")

    def delete(self, key: str) -> None:
        raise StorageError("a storage grant deletes nothing: the platform prunes")

    def ping(self) -> None:
        """Raise StorageError unless the platform still honours the grant (it signs nothing for no keys)."""
        self._ask({"method": "GET", "keys": []})


def _check(response: httpx.Response, key: str) -> None:
    status = response.status_code
    if status in (200, 204):
        return
    if status == 404:
        raise ObjectMissing(f"no object {key!r} in the store")
    if status == 403:
        raise _Expired()
    if status >= 500 or status == 429:
        raise _Transient(f"the store answered {status}")
    raise StorageError(f"the store answered {status} for {key}: {_detail(response)}")


def _detail(response: httpx.Response) -> str:
    try:
        response.read()
        body = response.json()
        return str(body.get("detail", body)) if isinstance(body, dict) else str(body)[:300]
    except ValueError:
        return response.text[:300]


def _pause(attempt: int) -> None:
    if attempt < ATTEMPTS - 1:
        time.sleep(0.5 * 2**attempt)


def _local_path(url: str) -> Path:
    return Path(unquote(urlparse(url).path))


def _copy_local(source: Path, key: str, dest: Path | io.BytesIO) -> None:
    try:
        with open(source, "rb") as handle, _writable(dest) as out:
            shutil.copyfileobj(handle, out, CHUNK)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise ObjectMissing(f"no object {key!r} in the store") from None


@contextmanager
def _writable(dest: Path | io.BytesIO) -> Iterator[BinaryIO]:
    """A path opened for writing, or a buffer emptied."""
    if isinstance(dest, io.BytesIO):
        dest.seek(0)
        dest.truncate()
        yield dest
        return
    with open(dest, "wb") as handle:
        yield handle


def _write_all(out: BinaryIO, chunks: Iterator[bytes]) -> None:
    for chunk in chunks:
        out.write(chunk)


def _chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk
