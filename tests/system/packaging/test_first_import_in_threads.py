"""The first use of transformers in a process may come from several web threads at once."""

from __future__ import annotations

import subprocess
import sys

from tests.support.stack import REPO

# In a fresh interpreter (nothing imported yet), six threads read a model config at the same moment,
# as the first quotes of a gunicorn worker's threads do.
SIX_THREADS = """
import threading
from kernel.modelfiles.hfconfig import build_config, rope_types

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
          "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 256}
start, failures = threading.Barrier(6), []

def read():
    start.wait()
    try:
        build_config(CONFIG)
        rope_types()
    except Exception as error:
        failures.append(repr(error))

threads = [threading.Thread(target=read) for _ in range(6)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(failures)
"""


def test_six_threads_reading_their_first_model_config_at_once_all_succeed():
    # transformers' lazy module, imported by several threads at once, handed all but one of them a
    # half-built module: "cannot import name 'AutoConfig' from 'transformers'", a 500 on a busy start.
    result = subprocess.run(
        [sys.executable, "-c", SIX_THREADS], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
