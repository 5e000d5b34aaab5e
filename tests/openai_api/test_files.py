"""/v1/files with the official client: upload, list, retrieve, content, delete; errors in OpenAI's shape."""

from __future__ import annotations

import openai
import pytest

from base.models import Preferences
from fleet.choices import DatasetKind
from fleet.models import Dataset
from tests.support.openai_files import chat_jsonl

pytestmark = pytest.mark.django_db


def error_of(raised: pytest.ExceptionInfo) -> dict:
    body = raised.value.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def test_a_chat_file_is_uploaded_as_a_chat_dataset_and_read_back(alice, openai_for):
    client = openai_for(alice)

    uploaded = client.files.create(file=("train.jsonl", chat_jsonl()), purpose="fine-tune")

    dataset = Dataset.objects.get(owner=alice)
    assert uploaded.id == f"file-{dataset.pk}" and uploaded.object == "file"
    assert uploaded.filename == "train.jsonl" and uploaded.purpose == "fine-tune" and uploaded.status == "processed"
    assert uploaded.bytes == len(chat_jsonl()) and uploaded.created_at == int(dataset.created_at.timestamp())
    assert dataset.kind == DatasetKind.CHAT and dataset.samples == 8
    assert client.files.retrieve(uploaded.id) == uploaded
    assert [item.id for item in client.files.list()] == [uploaded.id]
    assert client.files.content(uploaded.id).read() == chat_jsonl()
    deleted = client.files.delete(uploaded.id)
    assert deleted.deleted and deleted.id == uploaded.id
    with pytest.raises(openai.NotFoundError) as raised:
        client.files.retrieve(uploaded.id)
    assert error_of(raised)["type"] == "invalid_request_error"


def test_other_purposes_and_bad_files_are_400s_naming_the_parameter(alice, openai_for):
    client = openai_for(alice)
    with pytest.raises(openai.BadRequestError) as raised:
        client.files.create(file=("train.jsonl", chat_jsonl()), purpose="assistants")
    assert error_of(raised)["param"] == "purpose"
    with pytest.raises(openai.BadRequestError) as raised:
        client.files.create(file=("train.jsonl", b'{"messages": "not a list"}\n'), purpose="fine-tune")
    error = error_of(raised)
    assert error["param"] == "file" and "Line 1" in error["message"] and error["type"] == "invalid_request_error"
    assert not Dataset.objects.exists()


def test_another_users_file_is_a_404_everywhere(alice, bob, openai_for):
    mine = openai_for(alice).files.create(file=("a.jsonl", chat_jsonl()), purpose="fine-tune")
    theirs = openai_for(bob)

    for call in (theirs.files.retrieve, theirs.files.content, theirs.files.delete):
        with pytest.raises(openai.NotFoundError) as raised:
            call(mine.id)
        assert mine.id in error_of(raised)["message"]
    assert list(theirs.files.list()) == []
    with pytest.raises(openai.NotFoundError):
        theirs.files.retrieve("not-an-id")
    assert Dataset.objects.filter(owner=alice).exists()


def test_files_are_listed_newest_first_a_page_at_a_time(alice, openai_for):
    client = openai_for(alice)
    ids = [client.files.create(file=(f"{n}.jsonl", chat_jsonl(seed=n)), purpose="fine-tune").id for n in range(3)]

    first = client.files.list(limit=2)
    assert [item.id for item in first.data] == ids[:0:-1] and first.has_more
    assert [item.id for item in client.files.list(limit=2)] == ids[::-1]  # the client follows `after`
    assert [item.id for item in client.files.list(order="asc")] == ids
    assert list(client.files.list(purpose="batch")) == []
    for params, param in (({"limit": 0}, "limit"), ({"after": "ftjob-1"}, "after"), ({"order": "up"}, "order")):
        with pytest.raises(openai.BadRequestError) as raised:
            client.files.list(**params)
        assert error_of(raised)["param"] == param


def test_tokens_read_only_tokens_and_rate_limits_answer_in_openais_shape(alice, openai_for, monkeypatch):
    with pytest.raises(openai.AuthenticationError) as raised:
        openai_for(api_key="sk-not-a-starverse-token").files.list()
    assert error_of(raised)["code"] == "invalid_api_key"
    with pytest.raises(openai.PermissionDeniedError) as raised:
        openai_for(alice, scope="read_only").files.create(file=("a.jsonl", chat_jsonl()), purpose="fine-tune")
    assert error_of(raised)["message"] == "This API token is read-only."
    with pytest.raises(openai.AuthenticationError):
        openai_for(alice, expired=True).fine_tuning.jobs.list()

    monkeypatch.setattr("portal.api.throttling.UserThrottle.allow_request", lambda self, request, view: False)
    monkeypatch.setattr("portal.api.throttling.UserThrottle.wait", lambda self: 7)
    with pytest.raises(openai.RateLimitError) as raised:
        openai_for(alice).files.list()
    assert error_of(raised)["code"] == "rate_limit_exceeded"
    assert raised.value.response.headers["Retry-After"] == "7"


def test_the_gateway_answers_in_openais_english_to_a_chinese_speaking_owner(alice, openai_for):
    """The site and the REST API speak the owner's saved language (this refusal is Chinese under /api/v1/);
    OpenAI's clients read OpenAI's English wording."""
    Preferences.objects.create(user=alice, language="zh-hans")
    client = openai_for(alice, scope="read_only").with_options(default_headers={"Accept-Language": "zh-CN"})
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client.files.create(file=("a.jsonl", chat_jsonl()), purpose="fine-tune")
    assert error_of(raised)["message"] == "This API token is read-only."


def test_an_unknown_v1_path_is_openais_404(alice, raw_for):
    response = raw_for(alice).get("embeddings")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Invalid URL (GET /v1/embeddings)"
