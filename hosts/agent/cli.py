"""Command line of the node agent: `python -m hosts.agent --platform URL --enrollment-token-file PATH`.

argparse, not a CLI framework: the agent is installed on compute hosts and should need nothing
beyond httpx (and torch, which the ranks need anyway).

The enrollment token never travels on the command line, where every user of the host can read it
(`ps`, /proc/PID/cmdline): it comes from STARVERSE_ENROLLMENT_TOKEN or from a file only its owner
can read, and a token given as an argument is refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import stat
import sys
from pathlib import Path

from hosts.agent import AGENT_VERSION
from hosts.agent.devices import DeviceError
from hosts.agent.loop import Agent, AgentConfig, AgentFatal
from hosts.agent.ranks import DEFAULT_RANK_MODULE
from hosts.runtime.staging import CACHE_BYTES_ENV, CACHE_DIR_ENV
from kernel.protocol import ADDRESS_AUTO, is_storage_credential

log = logging.getLogger("hosts.agent")


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="python -m hosts.agent",
        description="Starverse node agent: enrolls this host and runs training ranks for the platform.",
    )
    parser.add_argument(
        "--platform",
        default=env("STARVERSE_PLATFORM_URL"),
        help="platform base URL, e.g. http://127.0.0.1:8000 (env STARVERSE_PLATFORM_URL)",
    )
    parser.add_argument(
        "--enrollment-token-file",
        metavar="PATH",
        help="file holding the pool's sve_ enrollment token, readable only by its owner (chmod 600); "
        "or pass the token in env STARVERSE_ENROLLMENT_TOKEN",
    )
    # Only to refuse it with a helpful message: a token in argv is visible to every user of the host.
    parser.add_argument("--enrollment-token", help=argparse.SUPPRESS)
    parser.add_argument("--hostname", default=socket.gethostname(), help="node name (default: this host's)")
    parser.add_argument("--simulate", metavar="CHIP:COUNT", help="offer COUNT simulated CHIP chips (CPU)")
    parser.add_argument("--chip-type", metavar="SLUG", help="chip slug of the GPUs when not recognised")
    parser.add_argument("--spot", action="store_true", help="offer this node to the spot market")
    parser.add_argument(
        "--address",
        default=env("STARVERSE_AGENT_ADDRESS", ADDRESS_AUTO),
        help="address (IP or DNS name) other nodes' ranks reach this host at; 'auto' (the default): the "
        "address the platform sees this agent's requests come from (env STARVERSE_AGENT_ADDRESS)",
    )
    parser.add_argument(
        "--data-dir",
        default=env("STARVERSE_AGENT_DATA_DIR"),
        help="state and run folders (env STARVERSE_AGENT_DATA_DIR; default ~/.starverse/agent/HOSTNAME)",
    )
    parser.add_argument(
        "--cache-dir",
        default=env("STARVERSE_CACHE_DIR"),
        help="staging cache for stored datasets, models, checkpoints (env STARVERSE_CACHE_DIR; default DATA_DIR/cache)",
    )
    parser.add_argument(
        "--cache-gib",
        type=float,
        default=float(env("STARVERSE_CACHE_GIB", "20")),
        help="size cap of the staging cache in GiB (env STARVERSE_CACHE_GIB; default 20)",
    )
    parser.add_argument(
        "--once", action="store_true", help="poll once, run what it brings until the ranks exit, then exit"
    )
    parser.add_argument("--poll-wait", type=float, default=20.0, help="long-poll wait in seconds (max 25)")
    parser.add_argument(
        "--rank-module",
        default=env("STARVERSE_RANK_MODULE", DEFAULT_RANK_MODULE),
        help="module (or .py script) run for each rank (env STARVERSE_RANK_MODULE)",
    )
    parser.add_argument(
        "--stop-grace",
        type=float,
        default=30.0,
        help="seconds a stop waits for the ranks before SIGTERM, unless the command says",
    )
    parser.add_argument(
        "--warm-ranks",
        type=int,
        default=None,
        help="CPU ranks kept started with torch imported, so a rank (re)starts in under a second "
        "(default: one per simulated chip, at most 4; 0 for GPU hosts)",
    )
    parser.add_argument("--log-level", default=env("STARVERSE_AGENT_LOG_LEVEL", "INFO"))
    parser.add_argument("--version", action="version", version=f"starverse-agent {AGENT_VERSION}")
    return parser


class TokenError(Exception):
    """The enrollment token can't be read safely; the message says how to pass it."""


HOW_TO_PASS = (
    "pass it in the environment variable STARVERSE_ENROLLMENT_TOKEN, or with --enrollment-token-file PATH "
    "(a file only its owner can read: chmod 600 PATH)"
)


def enrollment_token(args: argparse.Namespace, environ=os.environ) -> str | None:
    """The token from --enrollment-token-file or STARVERSE_ENROLLMENT_TOKEN; never from argv."""
    if args.enrollment_token is not None:
        raise TokenError(f"--enrollment-token is refused: a command line is visible to every user (ps); {HOW_TO_PASS}")
    if args.enrollment_token_file:
        return read_token_file(Path(args.enrollment_token_file).expanduser())
    return environ.get("STARVERSE_ENROLLMENT_TOKEN") or None


def read_token_file(path: Path) -> str:
    """Like ssh with a private key: a file that others may read (or write) is refused."""
    try:
        with path.open() as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            if mode & 0o077:
                raise TokenError(
                    f"enrollment token file {path} is accessible by others (mode {mode:04o}); run chmod 600 {path}"
                )
            token = handle.read().strip()
    except OSError as exc:
        raise TokenError(f"can't read the enrollment token file: {exc}") from exc
    if not token:
        raise TokenError(f"enrollment token file {path} is empty")
    return token


def config_from(args: argparse.Namespace, token: str | None = None) -> AgentConfig:
    data_dir = Path(args.data_dir or Path.home() / ".starverse" / "agent" / args.hostname).expanduser()
    return AgentConfig(
        platform=args.platform,
        enrollment_token=token,
        hostname=args.hostname,
        data_dir=data_dir,
        simulate=args.simulate,
        chip_type=args.chip_type,
        spot=args.spot,
        address=args.address,
        once=args.once,
        poll_wait_s=args.poll_wait,
        rank_module=args.rank_module,
        default_grace_s=args.stop_grace,
        warm_ranks=args.warm_ranks if args.warm_ranks is not None else _default_warm_ranks(args.simulate),
    )


def _default_warm_ranks(simulate: str | None) -> int:
    if not simulate:
        return 0
    count = simulate.partition(":")[2]
    return min(int(count), 4) if count.isdigit() else 1


def give_ranks_storage(data_dir: Path, cache_dir: str | None, cache_gib: float) -> None:
    """The ranks this agent starts inherit this host's staging cache (hosts/runtime/staging.py). They reach
    the store through the grant in each launch, never with credentials: any the host was given stay here."""
    os.environ[CACHE_DIR_ENV] = str(Path(cache_dir or data_dir / "cache").expanduser())
    os.environ[CACHE_BYTES_ENV] = str(int(cache_gib * (1 << 30)))
    log.info("staging cache %s (%.0f GiB)", os.environ[CACHE_DIR_ENV], cache_gib)
    given = sorted(name for name in os.environ if is_storage_credential(name))
    if given:
        log.warning(
            "%s set for this agent: not needed and not passed to ranks (they get storage grants from the platform)",
            ", ".join(given),
        )


def _raise_interrupt(signum, frame) -> None:
    """SIGTERM behaves like Ctrl-C: it breaks the blocking long-poll and runs the shutdown."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per long-poll drowns what matters
    if not args.platform:
        parser.error("--platform (or STARVERSE_PLATFORM_URL) is required")
    try:
        token = enrollment_token(args)
    except TokenError as exc:
        parser.error(str(exc))
    config = config_from(args, token)
    give_ranks_storage(config.data_dir, args.cache_dir, args.cache_gib)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        agent = Agent(config)
        if not agent.state.node_token and not config.enrollment_token:
            parser.error(f"no saved node token: an enrollment token is required; {HOW_TO_PASS}")
        log.info(
            "agent %s for %s: %d x %s%s",
            config.hostname,
            config.platform,
            agent.inventory.chips,
            agent.inventory.chip_type,
            " (simulated)" if agent.inventory.simulated else "",
        )
        agent.run()
    except (DeviceError, AgentFatal) as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
