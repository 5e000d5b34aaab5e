"""Shared pieces of the OpenAPI description: the error answers every operation can give, added once."""

from __future__ import annotations

# Errors any operation can answer, documented once here instead of on every view (docs/RELIABILITY.md #23):
# 400 everywhere (a NUL character in the path or query), 413 where a body is taken, 429 everywhere
# (throttles), 401 where a token is needed, 404 for a missing object or a page past the end of a
# paginated list (`?page=`).
COMMON_ERRORS = {
    "400": "Bad input; `errors` names the field or parameter (e.g. a NUL character in the path or query).",
    "413": "The request body is larger than the server takes.",
    "401": "No, an invalid, a revoked or an expired API token.",
    "404": "No such object among yours, or no such page.",
    "429": "Too many requests; wait the seconds in the Retry-After header.",
}


AGENT_PATHS = "/api/v1/agent/"


def without_agent_endpoints(endpoints: list) -> list:
    """drf-spectacular preprocessing hook of the public schema and docs: the node agents' protocol is spoken by
    the platform's own agent with a node token, not by users, so users' docs don't list it (#28)."""
    return [endpoint for endpoint in endpoints if not endpoint[0].startswith(AGENT_PATHS)]


def document_common_errors(result, generator, request, public):
    """drf-spectacular postprocessing hook: add the common error answers each operation lacks."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault(
        "Error",
        {
            "type": "object",
            "properties": {"detail": {"type": "string"}, "errors": {"type": "object"}, "code": {"type": "string"}},
            "required": ["detail"],
        },
    )
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            wanted = {"400", "429"}
            if "requestBody" in operation:
                wanted.add("413")
            security = operation.get("security", [])
            if security and all(security):  # an empty requirement ({}) means the token is optional
                wanted.add("401")
            names = {parameter.get("name") for parameter in operation.get("parameters", [])}
            if "{" in path or "page" in names:
                wanted.add("404")
            for code in sorted(wanted - set(operation["responses"])):
                operation["responses"][code] = {"description": COMMON_ERRORS[code], "content": body}
    return result
