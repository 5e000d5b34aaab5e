"""Checkpoints in object storage, for ranks on hosts that share no disk.

Each rank here plays a host of its own: its own run folder and staging cache, LOCAL_RANK 0. Job A
trains 8 steps on 2 such hosts (ZeRO 1), saving at steps 4 and 8 into the store. B resumes step 4 on
3 hosts (another topology: the universal form is made once and stored beside the checkpoint) and
must reproduce A's losses; C resumes it on A's topology and stages only DeepSpeed's files and its own
RNG state. The store is the run's STORAGE_URL (the suite's SeaweedFS) or a folder; the ranks are given none
of its variables, only a storage grant and the platform's URL to ask with (grant_platform.py), as on hosts
that are third parties.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from hosts.runtime.local import LocalJob, job_launches, metrics
from kernel.protocol import PLATFORM_URL_ENV, is_storage_credential
from kernel.storage import open_store
from kernel.storage.trees import MANIFEST, read_manifest, upload_tree
from tests.support.grant_platform import GRANT, GrantPlatform
from tests.support.ranks import JOB_TIMEOUT_S, TINY

pytestmark = pytest.mark.slow
TEXT = "the quick brown fox jumps over the lazy dog. " * 200


def run_on_hosts(root: Path, name: str, micro_batches: list[int], env: dict, **fields) -> LocalJob:
    launches = job_launches(micro_batches, root / name, model=TINY, **fields)
    for launch in launches:
        launch.run_dir = str(root / name / f"host-{launch.rank}")
    job = LocalJob(
        launches, root / name, env={**env, "STARVERSE_CACHE_DIR": str(root / name / "cache")}, separate_hosts=True
    )
    codes = job.start().wait(JOB_TIMEOUT_S)
    assert codes == [0] * len(micro_batches), job.stderr_tail()
    return job


def host_env(platform: GrantPlatform) -> dict[str, str]:
    """A compute host's: the platform to ask for URLs, no store (the test's own variables are blanked)."""
    blanked = {name: "" for name in os.environ if is_storage_credential(name)}
    return {**blanked, PLATFORM_URL_ENV: platform.url}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("stored")
    store = open_store(os.environ.get("STORAGE_URL") or f"file://{root / 'store'}")
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    data = root / "dataset"
    data.mkdir()
    (data / "data.txt").write_text(TEXT)
    upload_tree(store, f"{prefix}/datasets/1/d", data)
    common = {
        "dataset": f"store:{prefix}/datasets/1/d/data.txt",
        "checkpoint_dir": f"store:{prefix}/checkpoints/job-1",
        "zero_stage": 1,
        "max_steps": 8,
        "storage_grant": GRANT,
    }
    with GrantPlatform(store, prefix) as platform:
        env = host_env(platform)
        a = run_on_hosts(root, "a", [3, 5], env, checkpoint_every=4, **common)
        step4 = f"store:{prefix}/checkpoints/job-1/step-4"
        b = run_on_hosts(root, "b", [1, 2, 5], env, checkpoint_every=0, resume_from=step4, **common)
        c = run_on_hosts(root, "c", [3, 5], env, checkpoint_every=0, resume_from=step4, **common)
    return {"a": a, "b": b, "c": c, "store": store, "prefix": prefix, "root": root, "platform": platform}


def test_ranks_stage_save_and_convert_with_nothing_but_their_grant(stored):
    assert stored["platform"].signed["GET"] > 0 and stored["platform"].signed["PUT"] > 0
    universal = read_manifest(stored["store"], f"{stored['prefix']}/checkpoints/job-1/step-4/universal")
    assert universal is not None  # written by B's rank 0 through the grant


def losses(job) -> dict[int, float]:
    return {step: event["loss"] for step, event in metrics(job.events(0)).items()}


def test_a_checkpoint_is_a_tree_whose_manifest_lists_every_hosts_files(stored):
    store, prefix = stored["store"], stored["prefix"]
    manifest = read_manifest(store, f"{prefix}/checkpoints/job-1/step-4")
    assert manifest is not None
    names = set(manifest.files)
    assert {"meta.json", "rng-0.pt", "rng-1.pt", "ds/mp_rank_00_model_states.pt"} <= names
    assert {n for n in names if "zero_pp_rank_" in n} == {
        "ds/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "ds/zero_pp_rank_1_mp_rank_00_optim_states.pt",
    }
    stored_names = {o.key.split("step-4/", 1)[1] for o in store.list(f"{prefix}/checkpoints/job-1/step-4")}
    assert stored_names >= names | {MANIFEST}
    events = [e for e in stored["a"].events(0) if e["event"] == "checkpoint"]
    assert [e["path"] for e in events] == [f"store:{prefix}/checkpoints/job-1/step-{n}" for n in (4, 8)]
    # the final one carries the exported model; no host keeps its local copy of a save
    assert "model/model.safetensors" in read_manifest(store, f"{prefix}/checkpoints/job-1/step-8").files
    for host in (0, 1):
        assert not list((stored["root"] / "a" / f"host-{host}" / "checkpoints").glob(".tmp-*"))


def test_a_resume_on_other_hosts_and_topology_reproduces_the_losses(stored):
    reference, resumed = losses(stored["a"]), losses(stored["b"])
    assert sorted(resumed) == [5, 6, 7, 8]
    for step in resumed:
        assert resumed[step] == pytest.approx(reference[step], rel=1e-4), step
    assert "resumed universal from" in stored["b"].stderr_path(0).read_text()
    universal = read_manifest(stored["store"], f"{stored['prefix']}/checkpoints/job-1/step-4/universal")
    assert universal is not None and any(name.startswith("zero/") for name in universal.files)


def test_a_resume_stages_only_the_files_its_ranks_load(stored):
    reference, resumed = losses(stored["a"]), losses(stored["c"])
    for step in resumed:
        assert resumed[step] == pytest.approx(reference[step], rel=1e-4), step
    assert "resumed native from" in stored["c"].stderr_path(0).read_text()
    for host in (0, 1):
        staged = stored["root"] / "c" / f"host-{host}" / "resume" / "step-4"
        names = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
        assert names == {
            "meta.json",
            f"rng-{host}.pt",
            "ds/mp_rank_00_model_states.pt",
            "ds/zero_pp_rank_0_mp_rank_00_optim_states.pt",
            "ds/zero_pp_rank_1_mp_rank_00_optim_states.pt",
        }


def test_a_checkpoint_without_its_manifest_cannot_be_resumed(stored, tmp_path):
    store, prefix = stored["store"], stored["prefix"]
    half = f"{prefix}/checkpoints/job-1/step-99"
    store.put_bytes(f"{half}/meta.json", b"{}")  # a save that died before its manifest
    launches = job_launches(
        [2],
        tmp_path,
        model=TINY,
        dataset="synthetic",
        max_steps=100,
        checkpoint_dir=f"store:{prefix}/checkpoints/job-1",
        resume_from=f"store:{half}",
        storage_grant=GRANT,
    )
    with GrantPlatform(store, prefix) as platform:
        job = LocalJob(launches, tmp_path, env={**host_env(platform), "STARVERSE_CACHE_DIR": str(tmp_path / "cache")})
        assert job.start().wait(JOB_TIMEOUT_S) == [1]
    assert "no manifest" in job.stderr_path(0).read_text()
