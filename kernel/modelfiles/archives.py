"""Unpacking a user's model archive safely, before anything of it is checked or stored.

An upload is an archive (.tar.gz/.tgz, .tar or .zip) of a model folder. `extract_archive` unpacks it
into a private folder: no member outside the destination, no links or devices, bounded sizes counted
while decompressing (a zip bomb stops at the limit), and only the files a loader reads
(`loaderfiles.admit_member`: config, safetensors weights, tokenizer), each within its own bound, so a
padding file is refused before a byte of it is written. kernel.modelfiles.checks then checks the folder.

No Django: the platform's services call this.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from kernel.modelfiles.errors import ARCHIVER_LITTER, GIB, PACK_IT, ModelFileError, refuse_pickle, too_large
from kernel.modelfiles.loaders import admit_member
from kernel.words import Words

COPY_CHUNK = 1024 * 1024
# What an archive may hold beside file content: headers, names, a zip's directory.
MAX_METADATA_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """How much an upload may be: archive bytes, bytes once unpacked, and files in it."""

    max_archive_bytes: int = 20 * GIB
    max_extracted_bytes: int = 20 * GIB
    max_members: int = 10_000


# -- archives --------------------------------------------------------------------------------------


def extract_archive(archive: Path, destination: Path, limits: Limits) -> Path:
    """Unpack the archive into `destination` (an empty folder); returns the model folder in it.

    That is `destination` itself, or the archive's single top-level folder when everything is in one.
    """
    size = archive.stat().st_size
    if size > limits.max_archive_bytes:
        raise too_large(Words.of("The archive is %(size)s bytes", size=f"{size:,}"), limits.max_archive_bytes)
    budget = Budget(limits)
    kind = archive_kind(archive)
    if kind == "zip":
        extract_zip(archive, destination, budget)
    else:
        extract_tar(archive, kind == "tar.gz", destination, budget)
    entries = list(destination.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return destination


def archive_kind(archive: Path) -> str:
    """zip, tar.gz or tar, told by the content (names lie)."""
    with open(archive, "rb") as file:
        head = file.read(512)
    if head[:2] == b"\x1f\x8b":
        return "tar.gz"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[257:262] == b"ustar":
        return "tar"
    raise ModelFileError.of(
        "The upload is not a .tar.gz, .tgz, .tar or .zip archive. " + PACK_IT, code="not_an_archive"
    )


def too_many_files(limit: int) -> ModelFileError:
    return ModelFileError.of(
        "The archive has more than %(limit)s files; a model folder needs a few dozen.",
        code="too_many_files",
        limit=f"{limit:,}",
    )


@dataclass
class Budget:
    """Members and bytes unpacked so far, refused past the limits as they are counted."""

    limits: Limits
    members: int = 0
    written: int = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise too_many_files(self.limits.max_members)

    def add(self, count: int) -> None:
        self.written += count
        if self.written > self.limits.max_extracted_bytes:
            raise too_large(Words("The archive unpacks to more than that"), self.limits.max_extracted_bytes)


def member_path(name: str) -> PurePosixPath | None:
    """The member's path inside the model folder; None for the archive's root or archivers' litter."""
    if "\x00" in name:
        raise ModelFileError.of(
            "The archive member %(name)s has a NUL character in its name.", code="unsafe_archive", name=repr(name)
        )
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise ModelFileError.of(
            "The archive member '%(name)s' has an absolute path, which is refused. " + PACK_IT,
            code="unsafe_archive",
            name=name,
        )
    parts = [part for part in re.split(r"[/\\]", name) if part not in ("", ".")]
    if ".." in parts:
        raise ModelFileError.of(
            "The archive member '%(name)s' points outside the model folder ('..'); it is refused.",
            code="unsafe_archive",
            name=name,
        )
    if not parts or parts[0] in ARCHIVER_LITTER or parts[-1] in ARCHIVER_LITTER:
        return None
    return PurePosixPath(*parts)


def special_file(name: str) -> ModelFileError:
    return ModelFileError.of(
        "The archive member '%(name)s' is a device, pipe or other special file; only files and folders are accepted.",
        code="unsafe_archive",
        name=name,
    )


def make_folder(destination: Path, relative: PurePosixPath) -> None:
    try:
        destination.joinpath(relative).mkdir(mode=0o700, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ModelFileError.of(
            "The archive has both a file and a folder named '%(name)s'.", code="invalid_archive", name=str(relative)
        ) from None


def wanted(relative: PurePosixPath, size: int) -> bool:
    """Whether to unpack a member of this size: pickles and files no loader reads are refused, model cards skipped."""
    refuse_pickle(str(relative))
    return admit_member(relative, size)


def write_member(source: BinaryIO, destination: Path, relative: PurePosixPath, budget: Budget) -> None:
    """Copy one member's bytes into a new private file, counting them against the budget."""
    make_folder(destination, relative.parent)
    target = destination.joinpath(relative)
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        raise ModelFileError.of(
            "The archive holds '%(name)s' twice.", code="invalid_archive", name=str(relative)
        ) from None
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG):
            raise ModelFileError.of(
                "The archive member '%(name)s' can't be unpacked: %(error)s.",
                code="invalid_archive",
                name=str(relative),
                error=error.strerror,
            ) from None
        raise
    with os.fdopen(descriptor, "wb") as target_file:
        while chunk := source.read(COPY_CHUNK):
            budget.add(len(chunk))
            target_file.write(chunk)


class MeteredTarStream:
    """The decompressed tar stream, refused once what isn't file content (headers, names) passes MAX_METADATA_BYTES.

    tarfile reads a long name or a PAX header into memory whole; a header that claims gigabytes would
    otherwise be read before any limit on files is reached.
    """

    def __init__(self, raw: BinaryIO, budget: Budget):
        self.raw, self.budget, self.read_bytes = raw, budget, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        self.read_bytes += len(chunk)
        # File content is copied in COPY_CHUNK pieces as soon as it is read, so it trails by at most one piece.
        if self.read_bytes - self.budget.written > MAX_METADATA_BYTES + COPY_CHUNK:
            raise ModelFileError.of(
                "The archive's headers and names are over %(limit)s bytes; it is refused. " + PACK_IT,
                code="invalid_archive",
                limit=f"{MAX_METADATA_BYTES:,}",
            )
        return chunk


def extract_tar(archive: Path, compressed: bool, destination: Path, budget: Budget) -> None:
    """Stream the tar once, member by member: each is checked before a byte of it is written."""
    try:
        with (
            (gzip.open if compressed else open)(archive, "rb") as raw,
            tarfile.open(fileobj=MeteredTarStream(raw, budget), mode="r|") as tar,
        ):
            for member in tar:
                budget.member()
                relative = member_path(member.name)
                if member.issym() or member.islnk():
                    raise ModelFileError.of(
                        "The archive member '%(name)s' is a link; links are refused. Archive real files "
                        "(e.g. `tar czhf`, which stores the files that links point to).",
                        code="unsafe_archive",
                        name=member.name,
                    )
                if not (member.isreg() or member.isdir()):
                    raise special_file(member.name)
                if relative is None:
                    continue
                if member.isdir():
                    make_folder(destination, relative)
                    continue
                if wanted(relative, member.size):
                    write_member(tar.extractfile(member), destination, relative, budget)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ModelFileError.of(
            "The archive is damaged or not a tar archive (%(error)s). " + PACK_IT,
            code="invalid_archive",
            error=str(error),
        ) from None


def extract_zip(archive: Path, destination: Path, budget: Budget) -> None:
    """Check every member of the zip's directory first, then unpack, counting the bytes actually inflated."""
    check_zip_directory(archive, budget.limits)
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = bundle.infolist()
            for info in members:
                budget.member()
                member_path(info.filename)
                kind = stat.S_IFMT(info.external_attr >> 16)
                if kind == stat.S_IFLNK:
                    raise ModelFileError.of(
                        "The archive member '%(name)s' is a link; links are refused.",
                        code="unsafe_archive",
                        name=info.filename,
                    )
                if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                    raise special_file(info.filename)
                if info.flag_bits & 0x1:
                    raise ModelFileError.of(
                        "The archive member '%(name)s' is encrypted; upload it unencrypted.",
                        code="invalid_archive",
                        name=info.filename,
                    )
            for info in members:
                relative = member_path(info.filename)
                if relative is None:
                    continue
                if info.is_dir():
                    make_folder(destination, relative)
                    continue
                if not wanted(relative, info.file_size):  # zipfile reads no more than file_size
                    continue
                with bundle.open(info) as source:
                    write_member(source, destination, relative, budget)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as error:
        raise ModelFileError.of(
            "The archive is damaged or not a zip archive (%(error)s). " + PACK_IT,
            code="invalid_archive",
            error=str(error),
        ) from None


def check_zip_directory(archive: Path, limits: Limits) -> None:
    """Refuse a zip whose directory declares too many members or too many bytes, before zipfile reads it all
    into memory (it builds every member's entry at once)."""
    with open(archive, "rb") as file:
        end = zipfile._EndRecData(file)  # the end-of-directory record, zip64 included, as ZipFile reads it
    if end is None:
        return  # not a zip after all: ZipFile says so
    if end[zipfile._ECD_ENTRIES_TOTAL] > limits.max_members:
        raise too_many_files(limits.max_members)
    if end[zipfile._ECD_SIZE] > MAX_METADATA_BYTES:
        raise ModelFileError.of(
            "The archive's directory is over %(limit)s bytes; it is refused. " + PACK_IT,
            code="invalid_archive",
            limit=f"{MAX_METADATA_BYTES:,}",
        )
