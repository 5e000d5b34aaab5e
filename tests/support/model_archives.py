"""Model folders and archives for tests: copies with changes, archives of every kind, crafted members, refusals."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from kernel.modelfiles.errors import ModelFileError


def copy_model(source: Path, target: Path, *, drop: tuple[str, ...] = (), config: dict | None = None) -> Path:
    """A copy of a model folder without some files, or with some config.json settings changed."""
    shutil.copytree(source, target)
    for name in drop:
        (target / name).unlink()
    if config:
        settings = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps({**settings, **config}))
    return target


def pack(folder: Path, archive: Path, *, top: str | None = None) -> Path:
    """The folder's files in an archive whose kind its name says (.tar.gz, .tgz, .tar or .zip), under `top` if given."""
    names = sorted(p for p in folder.rglob("*") if p.is_file())
    prefix = f"{top}/" if top else ""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in names:
                bundle.write(path, prefix + path.relative_to(folder).as_posix())
    else:
        mode = "w:gz" if archive.name.endswith((".tar.gz", ".tgz")) else "w"
        with tarfile.open(archive, mode) as tar:
            for path in names:
                tar.add(path, arcname=prefix + path.relative_to(folder).as_posix())
    return archive


def tar_with(archive: Path, folder: Path, *extra: tarfile.TarInfo, data: bytes = b"") -> Path:
    """A .tar.gz of a valid folder plus crafted members (links, devices, escaping names); files hold `data`."""
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            tar.add(path, arcname=path.relative_to(folder).as_posix())
        for member in extra:
            if member.isreg():
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    return archive


def member(name: str, kind: bytes = tarfile.REGTYPE, *, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def refusal(check, *args) -> ModelFileError:
    """The ModelFileError that check(*args) raises."""
    with pytest.raises(ModelFileError) as refused:
        check(*args)
    return refused.value
