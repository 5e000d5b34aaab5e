"""What a job's log and error texts may show people: no server paths, and library noise told apart.

Plain Python, shared by the node agent (which knows its own folders and cleans each line before it leaves
the host), the platform (which cleans again with what it knows, for agents that did not) and the job page
(which folds library noise away).

Paths: a rank's traceback names its run folder, the staging cache, the virtualenv and site-packages, the
checkout, the home folder. `PathScrubber` replaces each known folder with a neutral name (`<run>`,
`<cache>`, `<site-packages>`, …), longest first so the most specific name wins, and any other
site-packages or dist-packages folder by pattern.

Noise: Python warnings (and the source line printed under each), DeepSpeed's and torch's INFO/WARNING log
lines, glog-style C++ lines, and progress bars. Tracebacks, errors and the rank's own lines are not noise.
"""

from __future__ import annotations

import os
import re
import site
import sys
import sysconfig
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Any other installation's packages: /opt/conda/lib/python3.11/site-packages/torch/... -> <site-packages>/torch/...
PACKAGES = re.compile(r"(?:/[^\s/\"':]+)*/(?:site|dist)-packages(?![\w.-])")

WARNING = re.compile(r"^\S.*:\d+: [A-Za-z]*Warning: ")  # warnings.showwarning: "file:line: Category: message"
LIBRARY_LOG = re.compile(
    r"^(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\] \[(?:INFO|DEBUG|WARNING)\]"  # DeepSpeed's logger
    r"|\[?[IW]\d{4} \d\d:\d\d:\d\d\.\d+"  # glog / c10 (torch, gloo, NCCL): I1206 02:58:00.123456 or [W1206 …]
    r"|(?:INFO|WARNING|DEBUG):(?:torch|deepspeed|transformers|peft|accelerate|datasets|huggingface_hub)[\w.]*:)"
)
PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\r")  # tqdm: " 42%|████▏     | 42/100 [00:01<00:02, …]"


class PathScrubber:
    """Replaces folders this process knows with neutral names in a text."""

    def __init__(self, names: Mapping[str, str]) -> None:
        folders = {os.path.normpath(folder): name for folder, name in names.items() if folder and len(folder) > 1}
        self.names = folders
        # Longest first, so that a run folder inside the checkout reads <run>, not <starverse>/.data/…; a folder
        # ends where a path's name ends (/work/main is not a prefix of /work/main2).
        alternatives = "|".join(re.escape(folder) for folder in sorted(folders, key=len, reverse=True))
        self.pattern = re.compile(f"(?:{alternatives})(?![\\w.-])") if folders else None

    def __call__(self, text: str) -> str:
        if self.pattern is not None:
            text = self.pattern.sub(lambda match: self.names[match.group(0)], text)
        return PACKAGES.sub("<site-packages>", text) if "-packages" in text else text


def process_folders() -> dict[str, str]:
    """The folders every Starverse process has: its Python's packages and prefix, the checkout, home, /tmp."""
    packages = {*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"]}
    names = {folder: "<site-packages>" for folder in packages}
    names |= {sys.prefix: "<python>", sys.base_prefix: "<python>", str(REPO): "<starverse>"}
    names |= {tempfile.gettempdir(): "<tmp>", str(Path.home()): "~"}
    return names


def scrubber(extra: Mapping[str, str] | None = None) -> PathScrubber:
    """This process's folders, and `extra` ones (a rank's run folder, a data folder) with their names."""
    return PathScrubber({**process_folders(), **(extra or {})})


def progress_frame(line: str) -> str:
    """A line a progress bar redrew with carriage returns: only its last frame."""
    if "\r" not in line:
        return line
    frames = [frame for frame in line.split("\r") if frame.strip()]
    return frames[-1] if frames else ""


def is_library_noise(line: str) -> bool:
    """A library's warning, INFO log or progress bar: folded away on the job page."""
    return bool(WARNING.match(line) or LIBRARY_LOG.match(line) or PROGRESS.search(line))


def noise_flags(lines: Iterable[tuple[int, str]]) -> list[bool]:
    """For (rank, line) pairs in order: which are noise. The source line a warning prints under itself
    (indented) belongs to the warning."""
    flags, after_warning = [], set()
    for rank, line in lines:
        noise = is_library_noise(line) or (rank in after_warning and line[:1].isspace())
        after_warning.discard(rank)
        if WARNING.match(line):
            after_warning.add(rank)
        flags.append(noise)
    return flags
