"""The Store interface, the same on a directory and on S3: round trips, listing, deletes, presigned URLs,
missing objects and bad keys."""

from __future__ import annotations

import time

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from kernel.storage import ObjectMissing, StorageError, open_store
from kernel.storage.local import LocalStore
from kernel.storage.s3 import S3Store, content_disposition
from launcher._child import free_port


def keys(store, prefix: str) -> list[str]:
    return [item.key for item in store.list(prefix)]


def test_bytes_and_files_come_back_as_they_were_put(store, tmp_path):
    source = tmp_path / "weights.bin"
    source.write_bytes(bytes(range(256)) * 4096)  # 1 MiB, every byte value

    store.put_bytes("a/config.json", b'{"layers": 2}')
    store.put_file("a/weights.bin", source)

    assert store.get_bytes("a/config.json") == b'{"layers": 2}'
    store.get_file("a/weights.bin", tmp_path / "copy.bin")
    assert (tmp_path / "copy.bin").read_bytes() == source.read_bytes()
    with store.open("a/weights.bin") as stream:
        assert stream.read(3) == b"\x00\x01\x02"
        assert len(stream.read()) == source.stat().st_size - 3
    assert store.exists("a/config.json") and not store.exists("a/other.json")


def test_a_second_put_replaces_the_object_whole(store):
    store.put_bytes("k/v", b"first, the longer one")
    store.put_bytes("k/v", b"second")

    assert store.get_bytes("k/v") == b"second"
    assert [(o.key, o.size) for o in store.list("k")] == [("k/v", 6)]


def test_listing_is_recursive_in_key_order_with_sizes_and_times(store):
    before = time.time() - 5
    for key in ["job/step-2/b", "job/step-1/x/y", "job/step-10/a", "job-1/other", "job/a-b", "jobs/z"]:
        store.put_bytes(key, key.encode())

    listed = list(store.list("job"))

    assert [o.key for o in listed] == sorted(["job/a-b", "job/step-1/x/y", "job/step-10/a", "job/step-2/b"])
    assert all(o.size == len(o.key) for o in listed)
    assert all(before <= o.modified <= time.time() + 5 for o in listed)
    assert keys(store, "job/step-1") == ["job/step-1/x/y"]  # a prefix is a folder: not step-10
    assert keys(store, "nothing/here") == []


def test_delete_removes_one_object_and_a_missing_one_is_no_error(store):
    store.put_bytes("d/one", b"1")
    store.put_bytes("d/two", b"2")

    store.delete("d/one")
    store.delete("d/one")
    store.delete("never/was")

    assert keys(store, "d") == ["d/two"]


def test_delete_prefix_removes_everything_under_it_and_nothing_beside_it(store):
    for key in ["c/job-1/step-1/a", "c/job-1/step-1/b/c", "c/job-1/step-10/a", "c/job-10/a"]:
        store.put_bytes(key, b"x")

    assert store.delete_prefix("c/job-1/step-1") == 2
    assert keys(store, "c") == ["c/job-1/step-10/a", "c/job-10/a"]
    assert store.delete_prefix("c/job-1/step-1") == 0


def test_delete_prefix_never_takes_the_whole_store(store):
    store.put_bytes("keep/me", b"x")

    with pytest.raises(StorageError, match="invalid storage key"):
        store.delete_prefix("")
    assert store.exists("keep/me")


@pytest.mark.parametrize("read", ["get_bytes", "get_file", "open"])
def test_reading_a_missing_object_is_a_storage_error_naming_it(store, tmp_path, read):
    store.put_bytes("folder/file", b"x")
    calls = {
        "get_bytes": lambda key: store.get_bytes(key),
        "get_file": lambda key: store.get_file(key, tmp_path / "dest"),
        "open": lambda key: store.open(key),
    }

    for key in ["no/such/key", "folder", "folder/file/below"]:  # nothing, a "folder", under an object
        with pytest.raises(ObjectMissing, match=f"no object '{key}'"):
            calls[read](key)
        assert not store.exists(key)
    assert issubclass(ObjectMissing, StorageError)


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/./b", "../up", "a/../b", "a/", "nul\x00byte"])
def test_a_key_that_is_not_a_plain_relative_path_is_refused(store, key):
    with pytest.raises(StorageError, match="invalid storage key"):
        store.put_bytes(key, b"x")
    with pytest.raises(StorageError, match="invalid storage key"):
        store.get_bytes(key)


def test_ping_answers_for_a_working_store(store):
    store.ping()


def test_ping_fails_clearly_for_a_folder_that_cannot_be_written(tmp_path):
    (tmp_path / "file").write_text("not a folder")

    with pytest.raises(StorageError, match="is not writable"):
        LocalStore(tmp_path / "file" / "store").ping()


def test_ping_fails_clearly_for_a_bucket_that_does_not_exist(s3_store):
    with pytest.raises(StorageError, match="there is no bucket 'no-such-bucket-here' at http://"):
        S3Store("no-such-bucket-here", "x", client=s3_store.client).ping()


def test_a_server_that_does_not_answer_is_a_storage_error_not_a_crash():
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
        config=Config(connect_timeout=1, retries={"max_attempts": 1}),
    )
    store = S3Store("bucket", "x", client=client)

    for call in (
        store.ping,
        lambda: store.get_bytes("k"),
        lambda: store.put_bytes("k", b"x"),
        lambda: list(store.list("p")),
    ):
        with pytest.raises(StorageError, match="failed"):
            call()


def test_a_presigned_url_downloads_the_object_as_an_attachment(s3_store):
    data = b"final weights " * 1000
    s3_store.put_bytes("checkpoints/job-1/step-4/model/model.safetensors", data)

    url = s3_store.presigned_url("checkpoints/job-1/step-4/model/model.safetensors", "model.safetensors")
    response = httpx.get(url)

    assert response.status_code == 200 and response.content == data
    assert response.headers["content-disposition"] == 'attachment; filename="model.safetensors"'


def test_a_presigned_url_is_only_for_its_object(s3_store):
    s3_store.put_bytes("mine", b"mine")
    s3_store.put_bytes("theirs", b"theirs")

    url = s3_store.presigned_url("mine", "mine")

    assert httpx.get(url.replace("/mine?", "/theirs?")).status_code == 403


def test_presigned_urls_name_the_public_endpoint_when_one_is_set(s3_store):
    s3_store.put_bytes("public", b"for the browser")
    endpoint = s3_store.client.meta.endpoint_url
    public = S3Store(s3_store.bucket, s3_store.prefix, client=s3_store.client, public_endpoint="http://localhost:1")

    url = public.presigned_url("public", "public")

    assert url.startswith("http://localhost:1/")
    # signed for that host: the same path and query on the real endpoint (another host) is refused
    assert httpx.get(url.replace("http://localhost:1", endpoint)).status_code == 403
    assert (
        httpx.get(
            public.client.generate_presigned_url(
                "get_object", Params={"Bucket": s3_store.bucket, "Key": f"{s3_store.prefix}/public"}
            )
        ).content
        == b"for the browser"
    )


def test_a_directory_has_no_presigned_urls_the_web_streams_instead(tmp_path):
    store = LocalStore(tmp_path)
    store.put_bytes("a", b"x")

    assert store.presigned_url("a", "a") is None


def test_an_attachment_name_is_plain_ascii_with_the_utf8_name_beside_it():
    assert content_disposition("model.safetensors") == 'attachment; filename="model.safetensors"'
    assert content_disposition('a"b\\c\r\n.txt') == (
        "attachment; filename=\"a_b_c__.txt\"; filename*=UTF-8''a%22b%5Cc%0D%0A.txt"
    )
    assert content_disposition("模型.bin") == "attachment; filename=\"__.bin\"; filename*=UTF-8''%E6%A8%A1%E5%9E%8B.bin"


def test_a_directorys_files_and_folders_are_private(tmp_path):
    store = LocalStore(tmp_path / "store")
    previous = __import__("os").umask(0o022)
    try:
        store.put_bytes("datasets/7/abc/data.txt", b"secret")
    finally:
        __import__("os").umask(previous)

    assert (tmp_path / "store" / "datasets/7/abc/data.txt").stat().st_mode & 0o777 == 0o600
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "store").rglob("*") if p.is_dir()} == {0o700}


def test_deleting_the_last_object_of_a_folder_drops_the_empty_folders(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.put_bytes("a/b/c/d", b"x")
    store.put_bytes("a/keep", b"x")

    store.delete("a/b/c/d")

    assert [p.relative_to(tmp_path / "store").as_posix() for p in (tmp_path / "store").rglob("*")] == ["a", "a/keep"]


def test_a_half_written_object_is_never_listed(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.put_bytes("a/done", b"x")
    (tmp_path / "store" / "a" / ".tmp-abc123").write_bytes(b"half")

    assert keys(store, "a") == ["a/done"]


@pytest.mark.parametrize(
    ("url", "kind", "where"),
    [
        ("file:///srv/storage", LocalStore, "file:///srv/storage"),
        ("/srv/storage", LocalStore, "file:///srv/storage"),
        ("s3://bucket/some/prefix/", S3Store, "s3://bucket/some/prefix"),
        ("s3://bucket", S3Store, "s3://bucket"),
    ],
)
def test_a_storage_url_opens_its_backend(url, kind, where):
    store = open_store(url)

    assert isinstance(store, kind) and store.url == where


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("relative/folder", "needs an absolute path"),
        ("s3:///prefix", "name a bucket"),
        ("gs://bucket/x", "unsupported scheme 'gs'"),
    ],
)
def test_a_storage_url_that_cannot_work_is_refused_saying_why(url, message):
    with pytest.raises(StorageError, match=message):
        open_store(url)


def test_the_embedded_s3_refuses_unsigned_and_wrongly_signed_requests(s3_store):
    """Without its identity file SeaweedFS would let anyone read and write (and presigned URLs would prove nothing)."""
    s3_store.put_bytes("private", b"secret")
    endpoint = s3_store.client.meta.endpoint_url
    stranger = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, aws_access_key_id="someone", aws_secret_access_key="else", region_name="us-east-1"
    )
    signed = s3_store.presigned_url("private", "private")

    assert httpx.get(signed.split("?")[0]).status_code == 403
    assert httpx.put(signed.split("?")[0].replace("private", "planted"), content=b"x").status_code == 403
    with pytest.raises(ClientError, match="InvalidAccessKeyId"):
        stranger.get_object(Bucket=s3_store.bucket, Key=s3_store._key("private"))
    assert not s3_store.exists("planted")


def test_a_name_too_long_for_the_file_system_is_a_missing_object_not_a_crash(tmp_path):
    store = LocalStore(tmp_path)
    key = "a/" + "x" * 300

    with pytest.raises(ObjectMissing):
        store.get_bytes(key)
    with pytest.raises(ObjectMissing):
        store.open(key)
    assert not store.exists(key)
