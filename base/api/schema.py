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
# `errors` of an error answer: messages per field, and for a field made of fields a map of its own.
FIELD_ERRORS = {
    "type": "object",
    "additionalProperties": {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"$ref": "#/components/schemas/FieldErrors"}]
    },
}


def without_agent_endpoints(endpoints: list) -> list:
    """drf-spectacular preprocessing hook of the public schema and docs: the node agents' protocol is spoken by
    the platform's own agent with a node token, not by users, so users' docs don't list it (#28)."""
    return [endpoint for endpoint in endpoints if not endpoint[0].startswith(AGENT_PATHS)]


def describe_what_requests_may_hold(result, generator, request, public):
    """drf-spectacular postprocessing hook: say what the API's parsing does, which the views can't annotate (#28).

    - Request bodies take no field the schema doesn't name (base.api.validation.refuse_unknown_fields and the
      upload views refuse one by name), so every body schema is closed: `additionalProperties: false`.
    - An optional query parameter left empty (`?until=`) is taken as not given (DRF reads query strings as
      forms), so it allows an empty value; a required one must not be empty (`?chip=` is refused).
    """
    schemas = result.get("components", {}).get("schemas", {})
    for operation in operations_of(result):
        for content in operation.get("requestBody", {}).get("content", {}).values():
            ref = content.get("schema", {}).get("$ref", "")
            closed(schemas.get(ref.rsplit("/", 1)[-1]) if ref else content.get("schema"), schemas)
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "query":
                describe_query_parameter(parameter)
    return result


def operations_of(result) -> list[dict]:
    return [
        operation
        for operations in result.get("paths", {}).values()
        for operation in operations.values()
        if isinstance(operation, dict) and "responses" in operation
    ]


def closed(schema: dict | None, schemas: dict) -> None:
    """Mark an object schema, and the objects nested in it, as taking no other properties."""
    if not isinstance(schema, dict) or schema.get("type") != "object" or "properties" not in schema:
        return
    schema["additionalProperties"] = False
    for child in schema["properties"].values():
        for part in [child, *child.get("allOf", []), *child.get("oneOf", []), *child.get("anyOf", [])]:
            ref = part.get("$ref", "") if isinstance(part, dict) else ""
            closed(schemas.get(ref.rsplit("/", 1)[-1]) if ref else part, schemas)


def describe_query_parameter(parameter: dict) -> None:
    schema = parameter.setdefault("schema", {})
    if not parameter.get("required"):
        parameter["allowEmptyValue"] = True
    elif schema.get("type") == "string":
        schema.setdefault("minLength", 1)


def document_common_errors(result, generator, request, public):
    """drf-spectacular postprocessing hook: add the common error answers each operation lacks."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault(
        "Error",
        {
            "type": "object",
            "properties": {
                "detail": {"type": "string"},
                "errors": {"$ref": "#/components/schemas/FieldErrors"},
                "code": {"type": "string"},
            },
            "required": ["detail"],
        },
    )
    schemas["FieldErrors"] = FIELD_ERRORS
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
