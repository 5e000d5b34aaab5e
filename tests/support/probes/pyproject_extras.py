"""What each extra of pyproject.toml installs: its own requirements, and every distribution they pull in.

`installed_by(["web"])` is what `pip install '.[web]'` would put on a host, worked out from the
requirements of the distributions installed here (their metadata, markers evaluated for this
Python), so a test can hide the rest and run the code as that host would.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement

REPOSITORY = Path(__file__).resolve().parents[3]
PROJECT = "starverse-platform"


def project() -> dict:
    return tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extra: str | None = None) -> list[Requirement]:
    """The base dependencies (extra None) or one extra's, as written."""
    data = project()
    written = data["dependencies"] if extra is None else data["optional-dependencies"][extra]
    return [Requirement(line) for line in written]


def names(extra: str | None = None) -> set[str]:
    """The distributions an extra names itself (normalized)."""
    return {normalized(requirement.name) for requirement in requirements(extra)}


def installed_by(extras: Iterable[str]) -> set[str]:
    """Every distribution `pip install '.[extras]'` installs, by the installed distributions' metadata."""
    wanted = [*requirements(), *(requirement for extra in extras for requirement in requirements(extra))]
    found: dict[str, set[str]] = {}
    while wanted:
        requirement = wanted.pop()
        name = normalized(requirement.name)
        if name == PROJECT:  # a self-reference such as all = ["starverse-platform[web,agent]"]
            wanted += [r for extra in requirement.extras for r in requirements(extra)]
            continue
        if name in found and set(requirement.extras) <= found[name]:
            continue
        found.setdefault(name, set()).update(requirement.extras)
        for line in importlib.metadata.distribution(name).requires or []:
            needed = Requirement(line)
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in {"", *found[name]}):
                wanted.append(needed)
    return set(found)
