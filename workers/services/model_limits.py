"""The largest model an upload may be: what the fleet could train at all.

A config's sizes are bounded first (hfconfig.MAX_SIZES, before anything is built from it); then its
parameter count, from the config alone, must fit the planner's memory rule on the most chips a job may
use, of the chip type with the most memory, in the least demanding way a job could train it: LoRA, whose
frozen bf16 weights are sharded over every rank (ZeRO-3), with one sample per rank. A model that fails
even that could never be placed, so it is refused before its weights are read.
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from fleet.models import ChipType
from kernel.catalog import CHIP_TYPES
from kernel.modelfiles.errors import ModelFileError
from kernel.modelspecs import LORA, spec_from_config
from kernel.planner import DEFAULT_MAX_RANKS
from kernel.planner.memory import GIB, WEIGHT_BYTES, fits_chip

SEQ_LEN_FLOOR = 512  # one short sample is all the rule asks of a rank's activations


def check_fleet_can_train(config: dict) -> None:
    """Refuse (ModelFileError, code model_too_large_for_fleet) a config no job here could ever train."""
    try:
        spec = spec_from_config("upload", config, SEQ_LEN_FLOOR, mode=LORA, trainable=0)
        parameters = spec.parameters
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return  # malformed: the config's own checks say what is wrong
    name, memory_gib = largest_chip()
    if fits_chip(spec, memory_gib, DEFAULT_MAX_RANKS):
        return
    per_chip = WEIGHT_BYTES * parameters / DEFAULT_MAX_RANKS / GIB
    raise ModelFileError(
        _(
            "config.json describes a model of about %(parameters)s parameters, more than any job here can train: "
            "even as LoRA on %(chips)s chips (the most a job may use) of the largest type, %(chip)s with "
            "%(memory)s GiB, its frozen weights alone take %(per_chip)s GiB on each. Upload a smaller model."
        )
        % {
            "parameters": f"{parameters:,}",
            "chips": DEFAULT_MAX_RANKS,
            "chip": name,
            "memory": memory_gib,
            "per_chip": f"{per_chip:,.1f}",
        },
        code="model_too_large_for_fleet",
    )


def largest_chip() -> tuple[str, int]:
    """(name, memory GiB) of the chip type with the most memory: the operator's catalog, else the seed one."""
    chip = ChipType.objects.order_by("-memory_gib").values_list("name", "memory_gib").first()
    if chip is not None:
        return chip
    seed = max(CHIP_TYPES, key=lambda row: row[4])
    return seed[1], seed[4]
