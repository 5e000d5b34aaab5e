"""A model's chat template rendered with bounds: in a child process, under a CPU-time, memory and output cap.

A chat template is Jinja code from the user's upload. Jinja's sandbox stops it reaching Python's insides,
but not from running long: one preview whose template nested `range()` loops held a web thread for 9.5 s,
and a C-level `"x" * 10**10` can't even be interrupted in-process. So the web never renders one itself:
`render_chats` sends the template and the conversations to `python -m kernel.chat_templates`, which limits
its own CPU time (RLIMIT_CPU: the kernel stops it, however busy the host) and address space
(RLIMIT_AS), caps every rendered text at MAX_OUTPUT_CHARS while generating, and ranges at MAX_RANGE
items; the parent gives up after a wall-clock deadline. A refusal names the bound that stopped it.

The child renders as transformers' `apply_chat_template(..., tokenize=False)` does (the same sandboxed
environment, filters and globals, None-valued message keys dropped, the tokenizer's special tokens in the
context), with jinja2 alone: importing transformers would cost more than the rendering. Plain Python, no
Django: the platform's previews call it.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

# A chat's renders: the first `count` messages, with or without the generation prompt.
Prefix = tuple[int, bool]
Rendered = dict[Prefix, "str | TemplateRefused"]
MAX_OUTPUT_CHARS = 256 * 1024  # per rendered conversation: a preview clips each message to 4,096 characters
MAX_RANGE = 10_000  # Jinja's sandbox allows 100,000 per range(); nested, that is 10^10 iterations


class TemplateRefused(ValueError):
    """A chat template that failed, or passed a bound, while rendering; the message says which."""


@dataclass(frozen=True)
class RenderLimits:
    """What one batch of renders may cost: CPU seconds and memory of the child, and wall-clock seconds."""

    cpu_s: int = 1  # whole seconds (RLIMIT_CPU's unit), past what the child spent starting up
    wall_s: float = 5.0
    memory_bytes: int = 512 * 1024 * 1024
    output_chars: int = MAX_OUTPUT_CHARS


def render_chats(
    template: str,
    context: Mapping,
    chats: Sequence[tuple[list[dict], Sequence[Prefix]]],
    limits: RenderLimits | None = None,
) -> list[Rendered]:
    """For each (messages, prefixes): every prefix rendered by the template, in one child process for them all;
    each render's text, or why it wasn't rendered. Raises TemplateRefused when the child was stopped.

    A chat's messages are sent once and its prefixes as counts, so a long chat costs the web its size, not
    its size squared."""
    limits = limits or RenderLimits()
    request = {"template": template, "context": dict(context), "limits": asdict(limits)}
    request["chats"] = [{"messages": messages, "prefixes": [list(p) for p in prefixes]} for messages, prefixes in chats]
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-m", "kernel.chat_templates"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=limits.wall_s,
        )
    except subprocess.TimeoutExpired:
        raise TemplateRefused(
            f"The model's chat template took more than {limits.wall_s:g} s to render and was stopped."
        ) from None
    if done.returncode != 0:
        raise _stopped(done.returncode, done.stderr, limits)
    answers = json.loads(done.stdout)
    return [_rendered(prefixes, chat) for (_, prefixes), chat in zip(chats, answers, strict=True)]


def _rendered(prefixes: Sequence[Prefix], answers: list[dict]) -> Rendered:
    return {
        tuple(prefix): TemplateRefused(answer["error"]) if "error" in answer else answer["text"]
        for prefix, answer in zip(prefixes, answers, strict=True)
    }


def _stopped(returncode: int, stderr: str, limits: RenderLimits) -> TemplateRefused:
    """Why the child ended without an answer: its CPU time ran out (SIGXCPU), or something unforeseen."""
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return TemplateRefused(
            f"The model's chat template used more than {limits.cpu_s} s of CPU time to render and was stopped."
        )
    last = stderr.strip().splitlines()[-1][:300] if stderr.strip() else f"exit status {returncode}"
    return TemplateRefused(f"The model's chat template could not be rendered ({last}).")


# -- the child ---------------------------------------------------------------------------------------


def main() -> None:
    """Read a request on stdin, bound this process, render, and print one answer per prefix of each chat."""
    request = json.load(sys.stdin)
    limits = RenderLimits(**request["limits"])
    _limit_self(limits)
    try:
        template = _environment().from_string(request["template"])
    except Exception as error:  # a template that doesn't compile fails every render alike
        compile_error = {"error": f"The model's chat template is not valid Jinja: {error}"}
        answers = [[compile_error] * len(chat["prefixes"]) for chat in request["chats"]]
    else:
        answers = [_render_chat(template, request["context"], chat, limits) for chat in request["chats"]]
    json.dump(answers, sys.stdout)


def _render_chat(template, context: dict, chat: dict, limits: RenderLimits) -> list[dict]:
    messages = chat["messages"]
    return [_render(template, context, messages[:count], prompt, limits) for count, prompt in chat["prefixes"]]


def _limit_self(limits: RenderLimits) -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (spent + limits.cpu_s, spent + limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))


def _render(template, context: dict, messages: list[dict], add_generation_prompt: bool, limits: RenderLimits) -> dict:
    try:
        variables = {**context, "messages": _template_messages(messages), "tools": None, "documents": None}
        text, size = [], 0
        for piece in template.generate(**variables, add_generation_prompt=add_generation_prompt):
            size += len(piece)
            if size > limits.output_chars:
                return {"error": f"The model's chat template wrote more than {limits.output_chars:,} characters."}
            text.append(piece)
        return {"text": "".join(text)}
    except MemoryError:
        return {"error": f"The model's chat template used more than {limits.memory_bytes >> 20} MiB to render."}
    except Exception as error:  # the template's own errors (raise_exception, undefined names, bad types...)
        return {"error": f"The model's chat template refused the conversation: {error}"}


# Names a message's reasoning is passed under (transformers fills the first from the others).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _template_messages(messages: list[dict]) -> list[dict]:
    """As transformers hands them to a template: None-valued keys dropped, reasoning under every name."""
    shown = []
    for message in messages:
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[key] for key in REASONING_FIELDS if message.get(key) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        shown.append(message)
    return shown


def _environment():
    """transformers' chat template environment (utils/chat_template_utils.py), with ranges bounded."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` marks the assistant's text; rendered as its body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"Chat templates cannot set {name!r} on a namespace.")

    class TemplateDict:
        """`dict(...)` and `dict.fromkeys(...)`, without the type itself (no attribute tricks on it)."""

        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def bounded_range(*args):
        span = range(*args)
        if len(span) > MAX_RANGE:
            raise jinja2.exceptions.SecurityError(f"range() of {len(span):,} items; at most {MAX_RANGE:,}.")
        return span

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals.update(
        raise_exception=raise_exception,
        strftime_now=lambda format: datetime.now().strftime(format),
        dict=TemplateDict(),
        namespace=Namespace,
        range=bounded_range,
    )
    return environment


if __name__ == "__main__":
    main()
