"""The wire contracts between the platform, node agents and training ranks.

Imports neither Django nor torch: the node agent (`hosts/agent/`) and the training runtime
(`hosts/runtime/`) run on compute hosts and share only these shapes with the platform.

Platform <-> agent: JSON over HTTP under /api/v1/agent/, `Authorization: Bearer <node token>`.

1. POST /api/v1/agent/enroll/   (no Authorization header; the credential is in the body)
   -> {"enrollment_token" | "node_token", "hostname", "chip_type", "chips", "simulated",
       "spot_eligible", "address", "agent_version", "devices": [{"index", "name", "memory_gib"}],
       "runtimes": [stack, ...]}   (the stacks whose runtime the host has: kernel/stacks.py)
   <- 201 {"node_id", "node_token", "pool", "chip_type", "poll_timeout_s", "heartbeat_deadline_s",
           "address", "address_source": "declared|observed"}
    | 403 {"detail", "code"} (token unknown, revoked, expired or used up; hostname taken; more
      chips than the operator approved; real chips of a stack with no runtime on the host:
      "stack_runtime_missing", naming what to install)
    | 400 (a malformed field; "address" when none was declared and the platform can't see one)
   "address" is where other nodes' ranks reach this host (the rank-0 node's is every rank's
   MASTER_ADDR): an IP address or a DNS name the agent declares, or "" / "auto" (ADDRESS_AUTO):
   the address the platform sees the request come from (the peer's; behind one of the platform's
   TRUSTED_PROXIES, the nearest X-Forwarded-For hop that is not one). The answer's "address" is
   what the platform recorded; an observed address follows the agent (every poll updates it).
   A new hostname needs the pool's enrollment token (limited uses, expires). An enrolled one is
   re-enrolled only with its current node token (its agent does so when the host changed) or after
   the operator reset the node. Enrolling again rotates the node token (the old one stops working).

2. POST /api/v1/agent/poll/     heartbeat + long-poll for commands
   -> {"health": {...free-form numbers...}, "acks": [command ids done or refused],
       "ranks": [{"job_id", "epoch", "rank", "pid", "state": "starting|running|exited"}],
       "wait_s": 0..25}
   <- 200 {"commands": [Command...], "server_time", "address"}   (address: as recorded now)
   Returns at once when a command is pending, else when one arrives (the platform wakes it
   through Redis), else after wait_s with no commands. Every poll counts as a heartbeat. A
   command is re-sent on every poll until acked, so the agent must treat command ids as
   idempotent (executing each at most once).

3. POST /api/v1/agent/report/   what ranks said since the last report (batched)
   -> {"job_id", "epoch", "items": [Report...]}
   <- 200 {"accepted": n} | 409 {"detail": "stale epoch"} (the job moved on: stop those ranks)

4. POST /api/v1/agent/storage/  URLs for a placement's objects (a rank asks; hosts hold no store credentials)
   Authorization: Bearer <storage grant> (RankLaunch.storage_grant, "svg_…": one job epoch on one node)
   -> {"method": "GET"|"PUT", "keys": [key…], "sizes"?: {key: bytes}}
   <- 200 {"urls": {key: url}, "uploads": {key: {"upload_id", "part_size", "urls": [url…]}}, "expires_in": s}
   -> {"method": "COMPLETE", "key", "upload_id", "etags": [etag…]} | {"method": "ABORT", "key", "upload_id"}
   <- 200 {"key"}
    | 403 {"detail", "code": "outside_grant", "errors": {"keys": [...]}}: a GET outside the placement's
      inputs and its job's checkpoints, a PUT outside checkpoints/job-<id>/
    | 409 {"detail", "code": "grant_expired"}: the job moved on to another epoch, or ended | 401: no grant
   A URL works for its one object and method until it expires (GET and PUT straight to the store; a
   folder store answers file:// URLs: one machine's store, no isolation). "uploads" answers a PUT whose
   size was given, on a store that splits objects (S3): one URL per part, then COMPLETE with their ETags.

Command = {"id", "type": "start|checkpoint|stop", "job_id", "epoch", "payload"}
  start.payload = RankLaunch (one per rank on this node; "ranks" is a list of them)
  checkpoint.payload = {"reason"}      stop.payload = {"reason", "checkpoint": bool, "grace_s"}
  A stop ends the job's ranks of that epoch and older; grace_s 0 kills them at once (what a node
  declared lost finds queued when it comes back: its epoch was fenced at the loss).
An agent refuses (acks with an error, does nothing) any command whose epoch is older than the
newest epoch it has seen for that job, and kills its ranks of an epoch a report called stale (409).

Report (one item) =
  {"kind": "metric", "rank", "step", "loss", "tokens", "tokens_per_s", "step_time_s",
   "samples_seen", "memory_mb", "t"}
| {"kind": "log", "rank", "line", "t"}
| {"kind": "checkpoint", "rank", "step", "path", "seconds", "stopping", "loss", "eval_loss", "t"}
    (stopping: the last one before a stop; loss: the step's train loss; eval_loss: held-out, when measured there)
| {"kind": "eval", "rank", "step", "eval_loss", "eval_tokens", "t"}   (rank 0, the held-out loss after step)
| {"kind": "exit", "rank", "code", "error", "t"}      (error: the rank's last stderr lines)
| {"kind": "island", "rank", "step", "island", "change", "members", "syncs", "bytes_across", "bridge_gbps",
   "stack", "mode", "round_step", "t"}
    (an island's leader: change = joined | members | dropped | sync; round_step (a diloco sync): the step
    its round was sent at, H before `step` when it crossed while the islands trained; bridge_gbps, only when it sent
    something since its last one: the Gbit/s its allreduces across the bridge achieved; see hosts/runtime/islands/)
| {"kind": "serving", "rank", "state": "starting|ready|draining|stopped|failed", "url", "engine", "simulated",
   "device", "error", "t"}
    (a serving replica, hosts/serving/replica.py: its engine's state; url: its OpenAI-compatible base ".../v1")

A report's "rank" is the rank's number in the job (`job_rank`): in a run of islands, its island's first
rank's number plus its rank inside the island.

Agent <-> rank: the agent starts `python -m hosts.runtime --config <launch.json>` with the
torch.distributed environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), the platform's
URL (STARVERSE_PLATFORM_URL: where the rank asks for storage URLs), never a store credential, and
GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME naming the local interface that holds the node's recorded
address (unless the agent's own environment sets them), so the ranks listen where their peers
reach them, not where the hostname resolves (often 127.0.0.1, or another network's address). The
rank prints one JSON object per line on stdout for each event, `{"event": "metric"|"checkpoint"|
"done", ...}` with the Report fields above; anything else on stdout/stderr is a log line. The
agent asks for a checkpoint or a stop by writing `control.json` ({"checkpoint": n, "stop": bool},
n increasing) in the job's run directory; rank 0 reads it at every step boundary and broadcasts
the decision, so all ranks checkpoint or stop at the same step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

AGENT_API_PREFIX = "/api/v1/agent"
NODE_TOKEN_PREFIX = "svn_"
ENROLLMENT_TOKEN_PREFIX = "sve_"
MAX_POLL_WAIT_S = 25
# What an agent keeps in its data directory (its node token among it); `ensure_demo_fleet` reads it too.
AGENT_STATE_FILE = "agent-state.json"
ADDRESS_AUTO = "auto"  # an enrollment's address: "use the address the platform sees me at"
CONTROL_FILE = "control.json"
STORAGE_GRANT_PREFIX = "svg_"
STORAGE_PATH = f"{AGENT_API_PREFIX}/storage/"
PLATFORM_URL_ENV = "STARVERSE_PLATFORM_URL"  # a rank's: the agent's --platform


def is_storage_credential(name: str) -> bool:
    """An environment variable that would hand a process the object store itself (its keys, its address):
    compute hosts never get one, only grants (section 4), so agents and ranks are started without them."""
    return name.startswith("AWS_") or name in ("STORAGE_URL", "STORAGE_PUBLIC_ENDPOINT_URL")


class CommandType:
    START = "start"
    CHECKPOINT = "checkpoint"
    STOP = "stop"


class ReportKind:
    METRIC = "metric"
    LOG = "log"
    CHECKPOINT = "checkpoint"
    EVAL = "eval"
    EXIT = "exit"
    ISLAND = "island"
    SERVING = "serving"


@dataclass
class RankLaunch:
    """Everything one training rank needs; serialised to the rank's launch.json."""

    job_id: int
    epoch: int
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    model: dict  # ModelSpec.as_dict() + the source: "config" (config.json), "path" (a local model dir or None), "lora"
    dataset: str  # "synthetic" or a local path of an uploaded dataset file
    micro_batches: list[int]  # per rank, indexed by rank; sum = global batch
    max_steps: int
    zero_stage: int
    run_dir: str  # where control.json lives for this rank's node
    checkpoint_dir: str  # shared checkpoint storage for the job
    resume_from: str | None = None  # a checkpoint path, or None for a fresh start
    checkpoint_every: int = 50  # steps; 0 = only on demand and at the end
    learning_rate: float = 3e-3  # the peak rate when `hyperparameters` names none
    hyperparameters: dict = field(default_factory=dict)  # kernel.hyperparameters.Hyperparameters.as_dict(), resolved
    seed: int = 1234
    device: str = "cpu"  # "cpu" or "cuda:N"
    paced_tokens_per_s: float | None = None  # simulated chip: pace each step to this speed
    chip_type: str = ""
    eval_dataset: str | None = None  # a local eval file, or None
    eval_fraction: float = 0.0  # else hold out this fraction of the dataset's records for eval
    eval_every: int = 0  # steps between evals (0: only at the end); needs an eval set
    storage_grant: str | None = None  # the capability for this placement's storage (section 4), or None
    island: dict | None = None  # IslandLaunch.as_dict() when the run has islands (rank and world are the island's)
    # The logging rank's (hosts/runtime/tracking.py) W&B and MLflow settings, the owner's key or token in the
    # clear: {"wandb": {"project", "entity", "mode", "api_key"}, "mlflow": {"tracking_uri", "experiment",
    # "token"}}; None on every other rank. Never printed or reported.
    tracking: dict | None = None
    # A serving replica's engine (kernel.serving.EngineLaunch.as_dict(), its port 0: the replica picks a free
    # one): the agent runs `python -m hosts.serving.replica` instead of the training runtime. None: training.
    serve: dict | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


SYNC_STEP = "step"  # gradients averaged across islands every step: one flat world
SYNC_DILOCO = "diloco"  # H inner steps per island, then an outer Nesterov step on the averaged deltas
SYNC_MODES = (SYNC_STEP, SYNC_DILOCO)


@dataclass
class IslandLaunch:
    """A rank's island: its place in the run and how the islands keep in step (hosts/runtime/islands/).

    Inside an island, RankLaunch's rank, world_size, master_addr/port and micro_batches are the
    island's own DeepSpeed world. Across islands only each island's rank 0 (its leader) talks, to
    the job's torchft Lighthouse, over gloo.
    """

    index: int  # this island's number in the run: its place in every step's global batch
    batches: dict  # {island index (str): samples per step} for the islands planned at launch
    lighthouse: str  # the job's torchft Lighthouse: "http://host:port", or ":port" on the platform's host
    address: str  # where this island's leader listens for the other islands (its node's address)
    first_rank: int = 0  # the job-wide number of the island's rank 0 (what reports call its ranks)
    stack: str = "cpu"  # the island's software stack (kernel/stacks.py)
    mode: str = SYNC_STEP
    sync_every: int = 1  # H: inner steps between syncs (1 in step mode)
    outer_lr: float = 0.7  # DiLoCo's outer Nesterov SGD
    outer_momentum: float = 0.9
    overlap: bool = False  # diloco: a sync crosses while the islands train its next round, and lands a round late
    quorum_timeout_s: float = 30.0  # how long a leader waits for a quorum, and for a peer's allreduce
    start_timeout_s: float = 120.0  # how long the first step waits for every planned island to arrive
    joining: bool = False  # added to a running job: it trains only once healed from a healthy island

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> IslandLaunch:
        known = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in data.items() if key in known})

    @property
    def planned(self) -> dict[int, int]:
        """{island index: samples per step} as planned at launch."""
        return {int(index): int(batch) for index, batch in self.batches.items()}


def job_rank(launch: RankLaunch) -> int:
    """The rank's number in the job: its own, or in a run of islands its island's first rank's plus its own."""
    return launch.rank + int((launch.island or {}).get("first_rank", 0))


def lighthouse_address(lighthouse: str, platform_url: str | None) -> str:
    """A Lighthouse given as ":port" is on the platform's host, as the rank reaches the platform."""
    if not lighthouse.startswith(":"):
        return lighthouse
    from urllib.parse import urlsplit

    host = urlsplit(platform_url or "").hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}{lighthouse}"
