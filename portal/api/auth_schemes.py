"""OpenAPI descriptions of the site's two bearer tokens: a user's API token and a node's token.

Registered with drf-spectacular when imported (PortalConfig.ready).
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "portal.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token from `POST /api/v1/tokens/` or the dashboard.",
        }


class NodeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "workers.api.agent_auth.NodeTokenAuthentication"
    name = "nodeToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A node token from `POST /api/v1/agent/enroll/`.",
        }
