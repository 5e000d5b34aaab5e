"""Training files in OpenAI's chat JSONL for the /v1/ tests."""

from __future__ import annotations

import json


def chat_jsonl(count: int = 8, seed: int = 0) -> bytes:
    rows = [
        {
            "messages": [
                {"role": "system", "content": "You answer in one short sentence."},
                {"role": "user", "content": f"What is {i + seed} plus one?"},
                {"role": "assistant", "content": f"{i + seed} plus one is {i + seed + 1}."},
            ]
        }
        for i in range(count)
    ]
    return "".join(json.dumps(row) + "\n" for row in rows).encode()
