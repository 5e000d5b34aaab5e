"""What `make run` runs: the command line of each long-running process of a local platform (web, agent
service, Celery workers, beat, the demo fleet's node agents), from the environment.

launcher.platform starts them under the supervisor. No Django import here: Django only runs in
the children.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from kernel.protocol import is_storage_credential
from launcher._child import StoreError

# The demo agents and their training ranks (which inherit it) yield the CPU to web, Celery and the stores.
DEMO_FLEET_NICE = 19  # the lowest priority: a busy fleet must not slow a restarting web tier


def env_port(name: str, default: int, environ: Mapping[str, str] = os.environ) -> int:
    value = environ.get(name, "").strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or not 0 < int(value) < 65536:
        raise StoreError(f"{name}={value!r} is not a TCP port number.")
    return int(value)


def env_count(name: str, default: int, what: str, environ: Mapping[str, str]) -> int:
    """A positive whole number from the environment (`default` when unset), or an error naming the variable."""
    value = environ.get(name, "").strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise StoreError(f"{name}={value!r} is not a number of {what} (a whole number, 1 or more).")
    return int(value)


def web_address(env: Mapping[str, str]) -> tuple[str, int]:
    """Where gunicorn binds: STARVERSE_HOST (default 127.0.0.1) and PORT (default 8000)."""
    return env.get("STARVERSE_HOST") or "127.0.0.1", int(env.get("PORT") or 8000)


def agent_address(env: Mapping[str, str]) -> tuple[str, int]:
    """Where the async agent service binds: the web's host, port AGENT_PORT (default PORT + 1)."""
    host, port = web_address(env)
    return host, env_port("AGENT_PORT", port + 1, env)


def agent_service_command(env: Mapping[str, str]) -> str:
    """uvicorn serving portal.asgi: the node agents' long-polls wait there, not in gunicorn's threads.

    AGENT_WORKERS processes (default 2, as gunicorn's): one is one core at most (the GIL), and 2,000
    agents' polls and reports need more than that on a 2-core machine."""
    host, port = agent_address(env)
    workers = env_count("AGENT_WORKERS", 2, "processes", env)
    command = f"{shlex.quote(sys.executable)} -m uvicorn portal.asgi:application --host {shlex.quote(host)}"
    # uvicorn kills a worker that doesn't answer its health check in time (default 5 s), and with it every
    # poll it holds: on a busy 2-core machine a healthy worker can be that slow to answer.
    command += f" --workers {workers} --timeout-worker-healthcheck 30"
    # A backlog for a whole fleet reconnecting at once; no access log (2,000 agents poll every ~20 s);
    # a short graceful stop: a waiting long-poll is not worth waiting for (its agent polls again).
    command += f" --port {port} --backlog 4096 --no-access-log --timeout-graceful-shutdown 2"
    # The platform reads X-Forwarded-For itself, believing only TRUSTED_PROXIES (workers/api/client_address.py).
    command += " --no-proxy-headers"
    return command + " --lifespan on --log-level warning"


def _no_gunicorn_control_socket() -> str:
    """gunicorn >= 25 opens a control socket in ~/.gunicorn, shared by every local platform."""
    from gunicorn.config import KNOWN_SETTINGS

    known = {setting.name for setting in KNOWN_SETTINGS}
    return " --no-control-socket" if "control_socket_disable" in known else ""


def web_server_command(env: Mapping[str, str], bind: str) -> str:
    """gunicorn serving the site: WEB_WORKERS processes (default 2) of WEB_THREADS threads (default 8).

    Threads, so that a slow request (an upload from a slow link, an agent long-polling here rather than
    at the agent service) holds one thread, not a whole worker. Not more of them: every thread of a
    worker contends for its one GIL: at 50 API clients on 2 cores, 2 x 8 threads answered ~9% more
    requests than 2 x 16, with a shorter tail (docs/SCALE.md). Behind a reverse proxy that buffers
    request bodies (nginx does by default) a slow upload holds no thread until it has arrived.
    """
    workers = env_count("WEB_WORKERS", 2, "processes", env)
    threads = env_count("WEB_THREADS", 8, "threads", env)
    # No gunicorn access log: the site logs each request itself, with its request id (portal/logs.py).
    return (
        f"{shlex.quote(sys.executable)} -m gunicorn portal.wsgi:application --bind {bind} --workers {workers}"
        f" --worker-class gthread --threads {threads}"
    )


def platform_processes(env: Mapping[str, str]) -> dict[str, str]:
    """The long-running processes of a local platform: name -> shell command line.

    This is the hook for more processes (the demo fleet's node agents go here). The demo agents talk
    to "agents", the async agent service (portal/asgi.py), as a production fleet does behind the proxy.
    """
    python = shlex.quote(sys.executable)
    host, port = web_address(env)
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    agent_host, agent_port = agent_address(env)
    agents_url = f"http://[{agent_host}]:{agent_port}" if ":" in agent_host else f"http://{agent_host}:{agent_port}"
    schedule = shlex.quote(str(Path(env["STARVERSE_DATA_DIR"]) / "celerybeat-schedule"))
    web = web_server_command(env, bind)
    # Django is imported once, before the workers fork: a restarted web answers sooner on a busy machine.
    web += " --preload"
    # Two workers: the meter, reconciler, spot clearing and audits on the default queue; planning, which
    # users can flood with queued jobs, on `<queue>.planning` (portal.task_routes), so it never delays them.
    queue = env.get("CELERY_QUEUE") or "celery"
    celery_worker = f"{python} -m celery -A portal worker --loglevel INFO --concurrency 1"
    # A torchft Lighthouse per running job of islands (workers/services/lighthouses.py), where torchft is here.
    islands = Path(sys.executable).with_name("torchft_lighthouse").exists() or bool(env.get("LIGHTHOUSE_PROGRAM"))
    lighthouses = {"lighthouses": f"{python} manage.py run_lighthouses"} if islands else {}
    return {
        **lighthouses,
        **{name: f"nice -n {DEMO_FLEET_NICE} {line}" for name, line in demo_fleet_processes(env, agents_url).items()},
        "web": web + _no_gunicorn_control_socket(),
        "agents": agent_service_command(env),
        "worker": f"{celery_worker} -Q {shlex.quote(queue)} --hostname worker@%h",
        "planner": f"{celery_worker} -Q {shlex.quote(queue + '.planning')} --hostname planner@%h",
        "beat": f"{python} -m celery -A portal beat --loglevel INFO --schedule {schedule}",
    }


def demo_fleet_processes(env: Mapping[str, str], platform_url: str) -> dict[str, str]:
    """One simulated node agent per entry of <data dir>/demo-fleet.json (STARVERSE_DEMO_FLEET=0: none).

    Each agent reads its enrollment token from the 0600 file `ensure_demo_fleet` wrote: a token on
    a command line would be visible to every user of this machine (`ps`). Agents are started without the
    store's variables (STORAGE_URL, AWS_*) the platform's processes get: hosts are third parties, and their
    ranks reach storage through the grants in their launches (kernel/storage/grants.py).
    """
    data_dir = Path(env["STARVERSE_DATA_DIR"])
    fleet_file = data_dir / "demo-fleet.json"
    if env.get("STARVERSE_DEMO_FLEET", "1") == "0" or not fleet_file.exists():
        return {}
    unset = [f"-u {shlex.quote(name)}" for name in sorted(env) if is_storage_credential(name)]
    python = " ".join(["env", *unset, shlex.quote(sys.executable)]) if unset else shlex.quote(sys.executable)
    processes = {}
    for entry in json.loads(fleet_file.read_text()):
        args = [
            "--platform",
            platform_url,
            "--enrollment-token-file",
            entry["token_file"],
            "--hostname",
            entry["hostname"],
            "--simulate",
            f"{entry['chip']}:{entry['chips']}",
            "--data-dir",
            str(data_dir / "agents" / entry["hostname"]),
        ]
        if entry["spot"]:
            args.append("--spot")
        processes[entry["hostname"]] = f"{python} -m hosts.agent " + " ".join(shlex.quote(a) for a in args)
    return processes
