"""Storage benchmark: a checkpoint-sized tree through both backends and a host's staging cache.

    .venv/bin/python bench/storage.py [--mib 256] [--files 8]

Writes `--files` files of random bytes (`--mib` MiB in all, like a checkpoint's shards), then for the
directory backend and for S3 (an embedded SeaweedFS on loopback, started here) times:
upload (every file, then the manifest), a cold staging (download, SHA-256 check, link into a run
folder) and a warm one (every object already in the cache: links only), and the SHA-256 alone for
reference. Wall and CPU time of this process; the S3 server's CPU is not counted.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel.storage import open_store  # noqa: E402
from kernel.storage.cache import StagingCache  # noqa: E402
from kernel.storage.trees import local_files, sha256_file, upload_tree  # noqa: E402
from launcher._child import free_port  # noqa: E402
from launcher.s3 import EmbeddedS3  # noqa: E402


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(fn):
    wall, busy = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - wall, cpu() - busy


def make_tree(folder: Path, mib: int, files: int) -> None:
    per = mib * (1 << 20) // files
    for index in range(files):
        (folder / "ds").mkdir(parents=True, exist_ok=True)
        (folder / "ds" / f"zero_pp_rank_{index}_mp_rank_00_optim_states.pt").write_bytes(os.urandom(per))


def measure(store, source: Path, work: Path, mib: int) -> list[tuple[str, float, float]]:
    rows = []
    wall, busy = timed(lambda: upload_tree(store, "bench/step-1", source))
    rows.append(("upload", wall, busy))
    cache = StagingCache(work / "cache", cap_bytes=4 * mib << 20)
    wall, busy = timed(lambda: cache.stage_tree(store, "bench/step-1", work / "run-a"))
    rows.append(("stage, cold cache", wall, busy))
    wall, busy = timed(lambda: cache.stage_tree(store, "bench/step-1", work / "run-b"))
    rows.append(("stage, warm cache", wall, busy))
    store.delete_prefix("bench")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--files", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        root = Path(tmp)
        source = root / "tree"
        make_tree(source, args.mib, args.files)
        names = local_files(source)
        hash_wall, hash_cpu = timed(lambda: [sha256_file(source / name) for name in names])
        results = {"directory": measure(open_store(f"file://{root / 'store'}"), source, root / "dir", args.mib)}
        server = EmbeddedS3(root / "s3", free_port())
        with server:
            os.environ.update(server.environment())
            results["S3 (SeaweedFS, loopback)"] = measure(open_store(server.url), source, root / "s3w", args.mib)
    load = os.getloadavg()[0]
    print(
        f"{args.mib} MiB in {args.files} files; load average {load:.2f}; SHA-256 alone: "
        f"{hash_wall:.2f} s wall, {args.mib / hash_wall:.0f} MiB/s"
    )
    print(f"{'backend':<26} {'operation':<20} {'wall s':>8} {'cpu s':>8} {'MiB/s':>8}")
    for backend, rows in results.items():
        for name, wall, busy in rows:
            print(f"{backend:<26} {name:<20} {wall:>8.2f} {busy:>8.2f} {args.mib / wall:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
