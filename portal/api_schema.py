"""drf-spectacular's settings: how the API's OpenAPI schema is titled, named and post-processed
(the hooks are base/api/schema.py's). Imported by portal/settings.py."""

from __future__ import annotations

SPECTACULAR_SETTINGS = {
    "TITLE": "Starverse API",
    "DESCRIPTION": "Rent mixed AI accelerators: chips, pools, account, ledger and more. "
    "Authenticate with `Authorization: Bearer <token>` from `POST /api/v1/tokens/`.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Several components have a `status` of their own choices; name each set after what it is.
    "ENUM_NAME_OVERRIDES": {
        "BidStatusEnum": "market.models.BidStatus",
        "JobStatusEnum": "fleet.choices.JobStatus",
        "TrainingModeEnum": "fleet.choices.TrainingMode",
        "WandbModeEnum": ["online", "offline"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "base.api.schema.describe_what_requests_may_hold",
        "base.api.schema.document_common_errors",
    ],
}
