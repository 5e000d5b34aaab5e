"""The OpenAPI schema says what the API does, for the kinds of request where schemathesis found them disagreeing (#28).

Each test reads the public schema (/api/v1/schema/) and sends the request that disagreed: a body field the
schema didn't rule out but the API refuses, an empty query parameter, an empty required one, a field error
shaped otherwise than documented, a path that answered HTML. test_schemathesis.py fuzzes the rest.
"""

from __future__ import annotations

import pytest
from jsonschema import Draft7Validator

from tests.support.accounts import PASSWORD, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(client) -> dict:
    return client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()


def parameter(schema: dict, path: str, name: str) -> dict:
    return next(p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == name)


def request_bodies(schema: dict) -> list[dict]:
    components = schema["components"]["schemas"]
    found = []
    for operations in schema["paths"].values():
        for operation in operations.values():
            for content in operation.get("requestBody", {}).get("content", {}).values():
                ref = content["schema"].get("$ref", "")
                found.append(components[ref.rsplit("/", 1)[-1]] if ref else content["schema"])
    return found


def test_every_request_body_is_documented_closed_as_the_api_refuses_unknown_fields(schema, client, alice):
    bodies = request_bodies(schema)

    assert len(bodies) >= 9 and all(body["additionalProperties"] is False for body in bodies)
    response = client.post(
        "/api/v1/tokens/", {"username": "alice", "password": PASSWORD, "errors": "x"}, content_type="application/json"
    )
    assert response.status_code == 400 and response.json()["code"] == "unknown_field"


@pytest.mark.parametrize(
    ("path", "name"),
    [("/api/v1/usage/", "until"), ("/api/v1/jobs/", "page_size"), ("/api/v1/models/", "name")],
)
def test_an_empty_optional_query_parameter_is_documented_and_taken_as_not_given(schema, alice, catalog, path, name):
    api = token_client(alice)

    assert parameter(schema, path, name)["allowEmptyValue"] is True
    assert api.get(f"{path}?{name}=").json() == api.get(path).json()


def test_an_empty_required_query_parameter_is_ruled_out_by_the_schema_and_refused(schema, alice):
    chip = parameter(schema, "/api/v1/prices/history/", "chip")

    assert chip["required"] is True and chip["schema"]["minLength"] == 1
    response = token_client(alice).get("/api/v1/prices/history/?chip=")
    assert response.status_code == 400 and "chip" in response.json()["errors"]


def test_a_field_made_of_fields_gets_errors_in_the_documented_shape(schema, alice, catalog):
    spec = {"model": "llama-tiny", "dataset": "synthetic", "max_steps": 10, "chip_counts": {"rtx-4090": None}}

    response = token_client(alice).post("/api/v1/quotes/", spec, format="json")

    assert response.status_code == 400
    assert isinstance(response.json()["errors"]["chip_counts"], dict)
    documented = Draft7Validator({"$ref": "#/components/schemas/Error", "components": schema["components"]})
    assert not list(documented.iter_errors(response.json()))


def test_an_api_path_with_a_newline_answers_json_not_the_sites_html_page(alice):
    response = token_client(alice).get("/api/v1/jobs/1/artifacts/a%0Ab")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "No API endpoint" in response.json()["detail"]
