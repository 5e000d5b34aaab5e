"""A NodeOffer (built by hand for speed) behaves as the frozen dataclass it was."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from kernel.planner import NodeOffer


def test_an_unnamed_pool_is_named_after_the_chip_and_zone():
    assert NodeOffer("1", "h1", "rtx-4090", 8, zone="z2").pool == "rtx-4090@z2"
    assert NodeOffer("1", "h1", "rtx-4090", 8, False, "rack-7", "z2").pool == "rack-7"


def test_positional_and_keyword_arguments_and_defaults_match_the_fields():
    by_position = NodeOffer("7", "h7", "tpu-v5e", 4, True, "p", "z", True)
    by_name = NodeOffer(
        node_id="7", hostname="h7", chip="tpu-v5e", free_chips=4, spot_eligible=True, pool="p", zone="z", simulated=True
    )
    assert by_position == by_name and hash(by_position) == hash(by_name)
    defaults = NodeOffer("7", "h7", "tpu-v5e", 4)
    assert (defaults.spot_eligible, defaults.zone, defaults.simulated) == (False, "", False)
    assert [field.name for field in dataclasses.fields(NodeOffer)] == list(vars(by_position))


def test_it_stays_frozen_and_replace_and_pickle_keep_every_field():
    offer = NodeOffer("7", "h7", "tpu-v5e", 4, zone="z")
    with pytest.raises(dataclasses.FrozenInstanceError):
        offer.free_chips = 5  # type: ignore[misc]
    fewer = dataclasses.replace(offer, free_chips=2)
    assert (fewer.free_chips, fewer.pool, fewer.node_id) == (2, "tpu-v5e@z", "7")
    assert pickle.loads(pickle.dumps(offer)) == offer
    assert repr(offer).startswith("NodeOffer(node_id='7', hostname='h7', chip='tpu-v5e', free_chips=4")
