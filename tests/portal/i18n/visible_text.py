"""The check behind "no page shows an untranslated string": every visible text of a zh-hans page holds Chinese.

`untranslated(html, also_allowed=...)` lists the texts a person would read (text nodes, and the title,
placeholder, aria-label and alt attributes, and button values) that contain no Chinese character once
the allowed words are taken out: brand, chip, model and library names, units, numbers, money, dates,
and whatever the test adds (the user's own names: usernames, job and dataset names). Text inside
<code>, <pre>, <script>, <style>, <kbd>, <samp> and <template> is not prose and is skipped, as is any
element marked `translate="no"` or `lang="en"` (the language switch's "English").
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

CHINESE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
SKIPPED_ELEMENTS = {"code", "pre", "script", "style", "kbd", "samp", "template", "noscript", "svg", "math"}
VOID_ELEMENTS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
READ_ATTRIBUTES = ("title", "placeholder", "aria-label", "alt")

# Words that are the same in both languages: names, units and technical terms a Chinese page keeps in Latin
# letters. Matched case-insensitively as whole words.
ALLOWED_WORDS = r"""
Starverse Stripe Alipay WeChat Pay OpenAI Hugging Face HF PyTorch DeepSpeed ZeRO torchft DiLoCo LoRA QLoRA
NCCL HCCL CNCL XLA gloo cuda cann bang xla vLLM transformers safetensors TensorBoard W&B wandb MLflow S3
RTX A100 H100 H200 TPU v4 v5e Ascend 910B MLU370 CPU GPU NPU MLU GPT-2 gpt2 GPT Qwen Llama SmolLM tiny
API REST SDK CLI JSON CSV HTTP HTTPS URL ID SSE TOTP UTC GMT CST Asia/Shanghai CNY RMB PNG SVG YAML
GB GiB MB MiB KB TB Gbit/s Mbit/s tokens/s token/s tok/s ms s h min TFLOPS FLOPS MFU bf16 fp16 fp32 p50 p95
Spot English Bearer Python curl pip starverse max_tokens temperature
NVIDIA Google Huawei Cambricon MLU370-X8 80G 40G 24G GB/s TB/s
"""
_WORDS = sorted({word for word in ALLOWED_WORDS.split()}, key=len, reverse=True)
ALLOWED = re.compile(r"(?<![\w/])(?:" + "|".join(re.escape(word) for word in _WORDS) + r")(?![\w/])", re.IGNORECASE)
# Numbers, money, percentages, dates and times, ids (#12), versions, sizes, and punctuation.
NUMBERISH = re.compile(r"[#¥$€+\-−–—~≈×x]?\d[\d,.:/\-+%×x ]*[a-zA-Z]{0,2}\b|[^\w\s]|_")


def _leftover(text: str, also_allowed: tuple[str, ...]) -> str:
    for word in sorted(also_allowed, key=len, reverse=True):
        if word:
            text = text.replace(word, " ")
    text = ALLOWED.sub(" ", text)
    text = NUMBERISH.sub(" ", text)
    return " ".join(text.split())


def needs_translation(text: str, also_allowed: tuple[str, ...] = ()) -> bool:
    """True when the text has no Chinese and something other than allowed words, numbers and signs is left."""
    text = " ".join(text.split())
    if not text or CHINESE.search(text):
        return False
    return bool(re.search(r"[A-Za-z]", _leftover(text, also_allowed)))


class _Reader(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, skipped)
        self.texts: list[str] = []

    @property
    def skipping(self) -> bool:
        return any(skipped for _, skipped in self.stack)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        skipped = (
            tag in SKIPPED_ELEMENTS
            or attributes.get("translate") == "no"
            or (attributes.get("lang") or "").startswith("en")
            or "hidden" in attributes
        )
        if not (self.skipping or skipped):
            for name in READ_ATTRIBUTES:
                if attributes.get(name):
                    self.texts.append(attributes[name])
            if tag == "input" and attributes.get("type") in {"submit", "button"} and attributes.get("value"):
                self.texts.append(attributes["value"])
        if tag not in VOID_ELEMENTS:
            self.stack.append((tag, skipped))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID_ELEMENTS and self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                return

    def handle_data(self, data):
        if not self.skipping and data.strip():
            self.texts.append(data)


def visible_texts(html: str) -> list[str]:
    reader = _Reader()
    reader.feed(html)
    return [" ".join(text.split()) for text in reader.texts]


def untranslated(html: str, also_allowed: tuple[str, ...] = ()) -> list[str]:
    """The visible texts of the page that still read as English (each once, in page order)."""
    found: list[str] = []
    for text in visible_texts(html):
        if needs_translation(text, also_allowed) and text not in found:
            found.append(text)
    return found
