"""A compute host's work with only `.[agent]` installed (run by test_hosts.py under without.py).

`python without.py DISTS host_probe.py`: imports every module of the node agent and the training
runtime (and the plain modules they share with the platform), what a warm rank imports ahead of
its launch (torch, DeepSpeed, peft, the Llama classes), builds the catalog's llama-tiny and takes
its loss on a batch, sizes a config (kernel.modelfiles.hfconfig) and asks the agent's command line for its
version. Prints one line, `PROBE: {json}`, with the results and whether Django or DRF could be
found or were loaded (they must not).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import pkgutil
import runpy
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[3]
HOST_PACKAGES = ("hosts.agent", "hosts.runtime", "kernel.storage")
SHARED_MODULES = (
    "kernel.protocol",
    "kernel.modelspecs",
    "kernel.modelfiles.hfconfig",
    "kernel.catalog",
    "kernel.priority",
)
WEB_ONLY = ("django", "rest_framework")


def import_every_module() -> list[str]:
    imported = list(SHARED_MODULES)
    for name in SHARED_MODULES:
        importlib.import_module(name)
    for package in HOST_PACKAGES:
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            if not info.name.endswith(".__main__"):  # a program: it runs on import
                importlib.import_module(info.name)
                imported.append(info.name)
    return imported


def train_one_batch() -> float:
    import torch

    from hosts.runtime.hfmodel import ModelSource, build_model, token_loss_sum
    from kernel.modelspecs import resolve_model

    spec = resolve_model("llama-tiny")
    model = build_model(ModelSource.from_launch(spec.as_dict()), seed=0)
    ids = torch.randint(spec.vocab_size, (2, spec.seq_len + 1))
    loss_sum, tokens = token_loss_sum(model, ids, torch.ones_like(ids, dtype=torch.bool))
    return loss_sum.item() / tokens


def agent_version() -> str:
    sys.argv = ["hosts.agent", "--version"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
        runpy.run_module("hosts.agent", run_name="__main__")
    return printed.getvalue().strip()


def main() -> None:
    sys.path.insert(0, str(REPOSITORY))
    os.chdir(REPOSITORY)
    result = {"imported": import_every_module()}
    import deepspeed  # noqa: F401  (what hosts.runtime.__main__.standby imports)
    import peft  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401

    from kernel.modelfiles.hfconfig import model_shape
    from kernel.modelspecs import CATALOG

    result["loss"] = train_one_batch()
    result["parameters"] = model_shape(CATALOG["llama-tiny"].config).parameters
    result["agent_version"] = agent_version()
    result["findable"] = {name: importlib.util.find_spec(name) is not None for name in WEB_ONLY}
    result["loaded"] = sorted(name for name in sys.modules if name.partition(".")[0] in WEB_ONLY)
    print("PROBE:", json.dumps(result))


if __name__ == "__main__":
    main()
