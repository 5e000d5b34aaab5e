"""Rank 0's reading of control.json (the agent's checkpoint and stop requests)."""

from __future__ import annotations

import json

from hosts.runtime.control import ControlFile, Request


def write(run_dir, **data):
    (run_dir / "control.json").write_text(json.dumps(data))


def test_no_file_means_no_request(tmp_path):
    assert ControlFile(tmp_path, epoch=1).poll() == Request()


def test_a_checkpoint_request_is_acted_on_once(tmp_path):
    control = ControlFile(tmp_path, epoch=1)
    write(tmp_path, checkpoint=1, stop=False)
    assert control.poll().checkpoint
    assert not control.poll().checkpoint
    write(tmp_path, checkpoint=2, stop=False)
    assert control.poll().checkpoint


def test_stop_checkpoints_first_unless_told_not_to(tmp_path):
    write(tmp_path, checkpoint=0, stop=True)
    assert ControlFile(tmp_path, epoch=1).poll() == Request(checkpoint=True, stop=True)
    write(tmp_path, checkpoint=0, stop=True, stop_checkpoint=False, export=False)
    assert ControlFile(tmp_path, epoch=1).poll() == Request(checkpoint=False, stop=True, export=False)


def test_a_half_written_file_is_ignored_until_complete(tmp_path):
    (tmp_path / "control.json").write_text('{"checkpoint": 3, "st')
    control = ControlFile(tmp_path, epoch=1)
    assert control.poll() == Request()
    write(tmp_path, checkpoint=3)
    assert control.poll().checkpoint


def test_a_file_left_by_an_older_epoch_is_ignored(tmp_path):
    write(tmp_path, checkpoint=5, stop=True, epoch=1)
    assert ControlFile(tmp_path, epoch=2).poll() == Request()
    assert ControlFile(tmp_path, epoch=1).poll().stop
