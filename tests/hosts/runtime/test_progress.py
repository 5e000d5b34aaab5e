"""What a rank says in the job's log: rank 0's step lines, and libraries kept quiet (hosts/runtime/progress.py)."""

from __future__ import annotations

import os
import warnings

from hosts.runtime.progress import QUIET_ENV, ProgressLog, progress_line, quiet_libraries


def test_a_step_line_says_the_step_the_loss_and_the_jobs_tokens_per_s():
    assert progress_line(50, 200, 2.5, 12_345.6, 0.2125) == "step 50/200 · loss 2.5000 · 12,346 tokens/s · 0.21 s/step"
    assert progress_line(1, 200, None, 620.0, 0.83) == "step 1/200 · loss — · 620 tokens/s · 0.83 s/step"


def test_the_first_and_last_steps_get_a_line_and_the_rest_one_every_ten_seconds():
    now = [0.0]
    log = ProgressLog(max_steps=100, clock=lambda: now[0])
    said = []
    for step in range(1, 101):
        now[0] += 0.75  # a step every 0.75 s: 75 s in all
        if log.due(step):
            said.append(step)
    assert said == [1, 15, 29, 43, 57, 71, 85, 99, 100]


def test_libraries_warnings_about_themselves_are_silenced_and_ours_are_not(monkeypatch):
    for name in QUIET_ENV:
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_libraries()
        warnings.warn_explicit("deprecated", FutureWarning, "utils.py", 1, module="transformers.modeling_utils")
        warnings.warn_explicit("fallback", UserWarning, "checkpoint.py", 1, module="torch.utils.checkpoint")
        warnings.warn_explicit("ours", UserWarning, "train.py", 1, module="hosts.runtime.train")
    assert [str(w.message) for w in caught] == ["ours"]
    assert all(os.environ[name] == value for name, value in QUIET_ENV.items())
