"""Deployments for tests: a model that can be served, and a deployment request the API accepts."""

from __future__ import annotations

from fleet.models import UploadedModel
from kernel.modelfiles import hfconfig
from kernel.modelspecs import CATALOG

# A small deployment the API accepts once its `model` is set (servable_model(...).reference).
DEPLOYMENT = {"name": "tiny-chat", "max_budget": "28", "min_replicas": 1, "max_replicas": 2}


def servable_model(owner, name: str = "chat") -> UploadedModel:
    """An upload as its check records it (llama-tiny's config, uploaded): servable, unlike the catalog's own."""
    config = dict(CATALOG["llama-tiny"].config)
    shape = hfconfig.model_shape(config)
    return UploadedModel.objects.create(
        owner=owner, name=name, architecture="llama", parameters=shape.parameters, size_bytes=1, config=config,
        shape=shape.as_dict(), store_prefix=f"models/{owner.pk}/{name}", has_chat_template=True,
    )  # fmt: skip
