"""Chat and prompt/completion datasets: refused line by line at upload (API), and previewed on the
datasets page in a model's tokens with the loss mask shown (trained on / context only)."""

from __future__ import annotations

import json
import re
import time
from html import unescape

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from fleet.models import Dataset, UploadedModel
from kernel.chat_templates import RenderLimits
from kernel.storage.trees import upload_tree
from tests.support.accounts import token_client
from tests.support.hfmodels import CHAT_TEMPLATE, make_tokenizer, tiny_config
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db

CHAT = {
    "messages": [
        {"role": "user", "content": "the chip runs"},
        {"role": "assistant", "content": "runs chip the"},
    ]
}
TOKEN = re.compile(r'<span class="token (token-trained|token-context)"[^>]*>([^<]*)</span>')


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def jsonl(*records) -> bytes:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records).encode()


def upload_api(user, name: str, content: bytes):
    return token_client(user).post("/api/v1/datasets/", {"file": SimpleUploadedFile(name, content)}, format="multipart")


def stored(user, name: str, content: bytes) -> Dataset:
    response = upload_api(user, name, content)
    assert response.status_code == 201, response.json()
    return Dataset.objects.get(pk=response.json()["id"])


def preview_tokens(client, dataset: Dataset, **params) -> list[tuple[str, bool]]:
    """(text, trained) of every token chip on the preview, in order."""
    response = client.get(reverse("datasets"), {"preview": dataset.pk, **params})
    assert response.status_code == 200, response.content.decode()
    return [(unescape(text), kind == "token-trained") for kind, text in TOKEN.findall(response.content.decode())]


# Upload


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (jsonl(CHAT, '{"messages": [}'), "Line 2: not valid JSON"),
        (jsonl(CHAT, {"title": "x"}), 'Line 2: a record needs a "text" field, a "messages" list'),
        (jsonl(CHAT, {"messages": [{"role": "user", "content": 3}]}), 'Line 2: "messages" must be a list'),
        (
            jsonl(CHAT, {"messages": [{"role": "robot", "content": "hi"}]}),
            'Line 2: message 1 has the unknown role "robot"',
        ),
        (jsonl(CHAT, CHAT, {"messages": [{"role": "user", "content": "hi"}]}), 'Line 3: no "assistant" message'),
        (jsonl(CHAT, {"prompt": "q", "completion": "a"}), "Line 2: a {&quot;prompt&quot;"),
        (jsonl({"prompt": "q", "completion": "a"}, {"prompt": "q"}), 'Line 2: missing "completion"'),
        (jsonl({"prompt": "q", "completion": None}), 'Line 1: "completion" must be a string, not null'),
        (jsonl(CHAT, '{"text": ' + "[" * 5000 + "]" * 5000 + "}"), "Line 2: nested deeper than 32 levels"),
        (jsonl(CHAT, '{"messages": [{"role": "user", "content": "\\ud800"}]}'), "Line 2: \\ud800 is half of a"),
    ],
)
def test_a_malformed_line_is_refused_by_number_and_nothing_is_stored(alice, content, message):
    response = upload_api(alice, "data.jsonl", content)
    assert response.status_code == 400
    assert unescape(message) in response.json()["errors"]["file"][0]
    assert not Dataset.objects.exists()


def test_chat_and_completion_datasets_are_stored_with_their_kind_and_record_count(alice):
    chat = stored(alice, "chat.jsonl", jsonl(CHAT, "", CHAT, CHAT))
    pairs = stored(alice, "pairs.jsonl", jsonl({"prompt": "2+2=", "completion": "4"}))
    assert (chat.kind, chat.samples, chat.get_kind_display()) == ("chat", 3, "Chat")
    assert (pairs.kind, pairs.samples) == ("completion", 1)


# Preview


def test_a_chat_preview_greys_everything_but_the_assistant_turn(alice_client, alice):
    dataset = stored(alice, "chat.jsonl", jsonl(CHAT))
    tokens = preview_tokens(alice_client, dataset)
    assert "".join(text for text, trained in tokens if trained) == "runs·chip·the↵<eos>"
    assert "".join(text for text, trained in tokens if not trained) == "user:·the·chip·runs↵assistant:·"
    html = alice_client.get(reverse("datasets"), {"preview": dataset.pk}).content.decode()
    assert "trained on" in html and "context only" in html
    assert '<option value="byte" selected>byte-level (catalog models)</option>' in html


def test_a_preview_shows_the_first_five_records_and_256_tokens_of_each(alice_client, alice):
    dataset = stored(alice, "long.txt", "\n".join(f"{i}" + "x" * 300 for i in range(8)).encode())
    html = alice_client.get(reverse("datasets"), {"preview": dataset.pk}).content.decode()
    assert html.count('data-testid="preview-record"') == 5
    assert len(TOKEN.findall(html)) == 5 * 256
    assert html.count("first 256 tokens shown") == 5


def model_with_tokenizer(owner, tmp_path, chat_template: str | None = None) -> UploadedModel:
    """One of the owner's models whose stored tree is a tiny tokenizer (with the test chat template, or this one)."""
    folder = tmp_path / "tiny"
    tokenizer = make_tokenizer(folder)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
        tokenizer.save_pretrained(str(folder))
    upload_tree(platform_store(), f"models/{owner.pk}/tiny-{tmp_path.name}", folder)  # read through the web's cache
    return UploadedModel.objects.create(
        owner=owner,
        name="my tiny llama",
        architecture="llama",
        parameters=1,
        size_bytes=1,
        config=tiny_config(vocab_size=len(tokenizer)),
        shape={},
        has_chat_template=True,
        store_prefix=f"models/{owner.pk}/tiny-{tmp_path.name}",
    )


def test_a_preview_in_an_uploaded_models_tokens_uses_its_chat_template(alice_client, alice, tmp_path):
    model = model_with_tokenizer(alice, tmp_path)
    dataset = stored(alice, "chat.jsonl", jsonl(CHAT))
    html = alice_client.get(reverse("datasets"), {"preview": dataset.pk}).content.decode()
    assert f'<option value="{model.reference}">my tiny llama</option>' in html
    tokens = preview_tokens(alice_client, dataset, tokenizer=model.reference)
    assert "".join(text for text, trained in tokens if trained) == "runs·chip·the<|end|>↵"
    assert tokens[0] == ("<|user|>", False)


def test_a_stored_line_with_a_lone_surrogate_is_a_preview_error_not_a_500(alice_client, alice, tmp_path):
    """A file stored before uploads were checked for them: "\\ud800" can't be encoded for any tokenizer."""
    (tmp_path / "data.jsonl").write_bytes(b'{"text": "\\ud800 hi"}\n')
    prefix = f"datasets/{alice.pk}/old-{tmp_path.name}"
    upload_tree(platform_store(), prefix, tmp_path)
    dataset = Dataset.objects.create(
        owner=alice, name="old", kind="jsonl", store_prefix=prefix, file_name="data.jsonl", size_bytes=20, samples=1
    )

    response = alice_client.get(reverse("datasets"), {"preview": dataset.pk})

    assert response.status_code == 400
    assert "Line 1: \\ud800 is half of a UTF-16 surrogate pair" in unescape(response.content.decode())


def test_a_chat_template_with_nested_loops_is_stopped_within_its_bound_and_the_preview_says_so(
    alice_client, alice, tmp_path
):
    """Rendered in the web thread, these 10^8 iterations held it for a minute; 16 such previews stopped the site."""
    nested = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}" + CHAT_TEMPLATE
    model = model_with_tokenizer(alice, tmp_path, chat_template=nested)
    dataset = stored(alice, "chat.jsonl", jsonl(CHAT))

    started = time.monotonic()
    response = alice_client.get(reverse("datasets"), {"preview": dataset.pk, "tokenizer": model.reference})
    took = time.monotonic() - started

    assert response.status_code == 400
    error = unescape(response.content.decode()).split('data-testid="preview-error">')[1].split("</div>")[0]
    assert error.startswith("The model's chat template ") and error.endswith(" to render and was stopped."), error
    assert took < RenderLimits().wall_s + 15  # the child's wall-clock deadline, plus loading the tokenizer


def test_a_chat_template_that_writes_too_much_is_refused_per_record(alice_client, alice, tmp_path):
    model = model_with_tokenizer(alice, tmp_path, chat_template="{{ 'x' * 10**6 }}" + CHAT_TEMPLATE)
    dataset = stored(alice, "chat.jsonl", jsonl(CHAT, CHAT))

    html = unescape(
        alice_client.get(reverse("datasets"), {"preview": dataset.pk, "tokenizer": model.reference}).content.decode()
    )

    assert html.count("The model's chat template wrote more than 262,144 characters.") == 2


def test_a_preview_with_a_tokenizer_that_is_not_yours_is_refused_naming_it(alice_client, alice, bob):
    dataset = stored(alice, "chat.jsonl", jsonl(CHAT))
    theirs = UploadedModel.objects.create(
        owner=bob, name="bob's", architecture="llama", parameters=1, size_bytes=1, config={}, shape={}, store_prefix="x"
    )
    for choice in [theirs.reference, "gpt-4", "model:99999999999999999999"]:
        response = alice_client.get(reverse("datasets"), {"preview": dataset.pk, "tokenizer": choice})
        assert response.status_code == 400
        assert f"Unknown tokenizer &#x27;{choice}&#x27;" in response.content.decode()


@pytest.mark.parametrize("preview", ["other", "abc", "99999999999999999999", "9" * 5000])
def test_only_your_own_datasets_can_be_previewed(alice_client, bob, preview):
    theirs = stored(bob, "chat.jsonl", jsonl(CHAT))
    pk = theirs.pk if preview == "other" else preview
    assert alice_client.get(reverse("datasets"), {"preview": pk}).status_code == 404


def test_each_listed_dataset_links_to_its_preview(alice_client, alice):
    dataset = stored(alice, "chat.jsonl", jsonl(CHAT))
    html = alice_client.get(reverse("datasets")).content.decode()
    assert f'href="{reverse("datasets")}?preview={dataset.pk}#preview"' in html
    assert 'data-testid="dataset-preview"' not in html
