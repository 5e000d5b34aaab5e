"""A serving replica: `python -m hosts.serving.replica --config launch.json` (docs/SERVING.md).

The node agent starts it in place of a training rank when the launch has `serve` (an EngineLaunch): a
deployment's replica is a job with one rank, so the agent's fencing, stop, kill and exit reports, the
platform's placement, billing and spot reclaim all treat it as they treat training. It stages the model,
starts the engine (hosts/serving/process.py) on a free port of the node's address, and reports on stdout,
as a rank reports its events, `{"event": "serving", "state": ...}`: starting, ready (with its URL),
draining, stopped or failed.

A stop (control.json's `stop`, what the agent writes for a stop command, a reclaim notice among them)
drains first: the replica says "draining" (the gateway sends it nothing new), waits until no connection
to its engine is left open (the gateway opens one per request) or the drain time runs out, then stops the
engine and exits 0. SIGTERM (the agent's grace ran out) stops the engine at once. An engine that exits
on its own is a failure: exit 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from pathlib import Path

from hosts.runtime.events import EventStream, claim_stdout
from hosts.serving.process import EngineFailed, EngineProcess, free_port
from kernel.protocol import CONTROL_FILE, RankLaunch
from kernel.serving import FAILED, READY, STARTING, STOPPED, EngineLaunch, InvalidLaunch

DRAINING = "draining"
WATCH_INTERVAL_S = 0.2
DRAIN_S = 30.0  # at most this long for open requests to finish after a stop


class Stopped(Exception):
    """SIGTERM: stop now."""


def load_launch(path: str | Path) -> RankLaunch:
    data = json.loads(Path(path).read_text())
    known = {field.name for field in dataclasses.fields(RankLaunch)}
    return RankLaunch(**{key: value for key, value in data.items() if key in known})


def engine_launch(launch: RankLaunch, rank_dir: Path) -> EngineLaunch:
    """The launch's engine, on a free port of its host, its files in this replica's folder, its grant."""
    engine = EngineLaunch.from_dict(launch.serve or {})
    port = engine.port or free_port(engine.host)
    return dataclasses.replace(
        engine,
        port=port,
        device=launch.device if not engine.simulated else "cpu",
        run_dir=str(rank_dir),
        storage_grant=launch.storage_grant,
    ).check()


def stop_asked(run_dir: Path) -> bool:
    try:
        return bool(json.loads((run_dir / CONTROL_FILE).read_text()).get("stop"))
    except (OSError, ValueError):
        return False


def open_connections(port: int) -> int:
    """Established TCP connections to `port` on this host (/proc/net/tcp and tcp6, state 01)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def drain(port: int, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while open_connections(port) and time.monotonic() < deadline:
        time.sleep(WATCH_INTERVAL_S)


def serve(launch: RankLaunch, events: EventStream, rank_dir: Path, drain_s: float = DRAIN_S) -> int:
    """Run one replica until a stop; the exit status."""
    try:
        engine = EngineProcess(engine_launch(launch, rank_dir), die_with_parent=True)
    except InvalidLaunch as error:
        events.emit("serving", state=FAILED, error=str(error))
        return 1
    run_dir = Path(launch.run_dir)

    def report(state: str, **extra) -> None:
        status = engine.status()
        events.emit(
            "serving",
            state=state,
            url=status.url,
            engine=status.engine,
            simulated=status.simulated,
            device=status.device,
            **extra,
        )

    def on_term(signum, frame):
        raise Stopped

    signal.signal(signal.SIGTERM, on_term)
    try:
        report(STARTING)
        engine.start()
        try:
            engine.wait_ready()
        except EngineFailed as error:
            report(FAILED, error=str(error)[-2000:])
            return 1
        report(READY)
        while not stop_asked(run_dir):
            if engine.poll() != READY:
                report(FAILED, error=engine.error[-2000:])
                return 1
            time.sleep(WATCH_INTERVAL_S)
        report(DRAINING)
        drain(engine.launch.port, drain_s)
    except Stopped:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop short
        if engine.state in (STARTING, READY):
            engine.stop()
    report(STOPPED)
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve one deployment replica.")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    events = EventStream(0, claim_stdout())
    config = Path(args.config)
    launch = load_launch(config)
    sys.exit(serve(launch, events, config.parent))


if __name__ == "__main__":
    main()
