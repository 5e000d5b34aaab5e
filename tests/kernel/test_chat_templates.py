"""Chat templates rendered out of the web process (kernel/chat_templates.py): as transformers renders them,
and stopped, with a message naming the bound, when they run too long, write too much or take too much memory."""

from __future__ import annotations

import pytest

from kernel.chat_templates import RenderLimits, TemplateRefused, render_chats
from kernel.datasets.tokens import chat_prefixes
from tests.support.hfmodels import CHAT_TEMPLATE, make_tokenizer

CHAT = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "the chip runs"},
    {"role": "assistant", "content": "runs chip the", "thinking": None},
    {"role": "user", "content": "data fast"},
    {"role": "assistant", "content": "fast data"},
]
# What real templates use: special tokens from the context, namespace(), loop variables, tojson, dict(),
# generation tags and raise_exception in a branch not taken.
RICH_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(turns=0) %}"
    "{% for message in messages %}{% if message['role'] == 'tool' %}{{ raise_exception('no tools') }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{% set ns.turns = ns.turns + 1 %}{% generation %}"
    "{{ message['content'] | trim }}{{ eos_token }}{% endgeneration %}"
    "{% else %}[{{ loop.index }}] {{ message | tojson }} {{ dict(role=message['role']) | tojson }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{{ ns.turns }}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.mark.parametrize("template", [CHAT_TEMPLATE, RICH_TEMPLATE], ids=["the test models'", "a rich one"])
def test_every_prefix_renders_as_transformers_renders_it(tokenizer, template):
    tokenizer.chat_template = template
    prefixes = chat_prefixes(CHAT)

    (rendered,) = render_chats(template, tokenizer.special_tokens_map, [(CHAT, prefixes)])

    for count, prompt in prefixes:
        expected = tokenizer.apply_chat_template(CHAT[:count], tokenize=False, add_generation_prompt=prompt)
        assert rendered[(count, prompt)] == expected


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ 'x' * 10**6 }}", "The model's chat template wrote more than 262,144 characters."),
        ("{{ 'x' * 10**10 }}", "The model's chat template used more than 512 MiB to render."),
        ("{{ '%999999999s' % 'x' }}", "The model's chat template used more than 512 MiB to render."),
        ("{% for i in range(100000) %}{% endfor %}", "range() of 100,000 items; at most 10,000."),
        ("{{ raise_exception('system messages only') }}", "refused the conversation: system messages only"),
        ("{% if %}", "The model's chat template is not valid Jinja: Expected an expression"),
    ],
    ids=["too much output", "a huge string", "a huge format width", "a huge range", "its own error", "bad Jinja"],
)
def test_a_template_past_a_bound_or_in_error_is_refused_naming_it(template, message):
    (rendered,) = render_chats(template, {}, [(CHAT, [(2, False)])])

    assert isinstance(rendered[(2, False)], TemplateRefused)
    assert message in str(rendered[(2, False)])


def test_a_template_that_runs_past_its_cpu_time_is_stopped_whole():
    forever = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"

    with pytest.raises(TemplateRefused, match=r"to render and was stopped\.$"):
        render_chats(forever, {}, [(CHAT, [(2, False)]), (CHAT, [(5, False)])], RenderLimits(cpu_s=1, wall_s=30))


def test_a_template_cannot_reach_pythons_insides():
    (rendered,) = render_chats("{{ ''.__class__.__mro__ }}", {}, [(CHAT, [(1, False)])])

    assert "access to attribute '__class__' of 'str' object is unsafe" in str(rendered[(1, False)])
