"""The contract between the platform, a node agent and a serving engine on its host (issue #32).

Imports neither Django nor torch, like kernel/protocol.py: the agent (`hosts/agent/`) reads an
`EngineLaunch` from a command's payload and hands it to `hosts/serving/`, which stages the model,
starts the engine as a subprocess and reports an `EngineStatus`.

EngineLaunch = {"deployment_id", "replica", "model", "model_folder", "served_model_name", "engine",
                "device", "host", "port", "max_model_len", "adapter", "simulated", "chip_type",
                "run_dir", "storage_grant"}
  model:   a local Hugging Face folder, or a stored tree (`store:models/7/<uuid>`, a job's checkpoint
           tree `store:checkpoints/job-5/step-40` with model_folder "model")
  adapter: a LoRA adapter folder (local or `store:`) served on `model`, its base: vLLM serves it with
           `--enable-lora --lora-modules`; transformers' server gets the adapter merged into its base
  engine:  "vllm" (CUDA hosts) or "transformers" (`transformers serve`: CPU and simulated hosts)
  device:  "cpu" or "cuda:N"; a simulated chip serves on "cpu" and its status says `simulated: true`

EngineStatus = {"deployment_id", "replica", "state": "starting|ready|failed|stopped", "engine",
                "served_model_name", "url", "pid", "simulated", "device", "exit_code", "error"}
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields

ENGINE_TRANSFORMERS, ENGINE_VLLM = "transformers", "vllm"
ENGINES = (ENGINE_TRANSFORMERS, ENGINE_VLLM)
STARTING, READY, FAILED, STOPPED = "starting", "ready", "failed", "stopped"
ENGINE_STATES = (STARTING, READY, FAILED, STOPPED)
# One or two segments (`tiny-chat`, `alice/tiny-chat`) of letters, digits, ".", "_" and "-", each starting
# with a letter or digit: no "..", no absolute path, no ":" (transformers reads `name:file.gguf` as GGUF).
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}(/[A-Za-z0-9][A-Za-z0-9._-]{0,63})?$")
_DEVICE = re.compile(r"^(cpu|cuda:\d+)$")


class InvalidLaunch(ValueError):
    """An EngineLaunch that no engine can serve as it is (the message says why)."""


@dataclass(frozen=True)
class EngineLaunch:
    """Everything one replica's engine needs; sent as a command payload, kept in the replica's run folder."""

    model: str
    served_model_name: str
    port: int
    engine: str = ENGINE_TRANSFORMERS
    device: str = "cpu"
    host: str = "127.0.0.1"  # where the engine listens: the gateway's side of the host's network
    max_model_len: int | None = None  # prompt and answer, in tokens; None: the model's context length
    adapter: str | None = None  # a LoRA adapter folder (or stored tree) served on `model`
    model_folder: str | None = None  # only this folder of a stored `model` tree ("model" of a checkpoint)
    simulated: bool = False  # the chip is simulated: the engine runs on the CPU in its stead
    chip_type: str = ""
    deployment_id: int = 0
    replica: int = 0
    run_dir: str = ""  # the replica's own folder (staged inputs, merged weights, the engine's log); "" : a temp one
    storage_grant: str | None = None  # the capability for the stored model (kernel/protocol.py, section 4)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EngineLaunch:
        """The launch of a payload; unknown keys are left out (a newer platform may send more)."""
        known = {field.name for field in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    def check(self) -> EngineLaunch:
        """This launch, or InvalidLaunch naming the first field no engine can take."""
        if self.engine not in ENGINES:
            raise InvalidLaunch(f"engine {self.engine!r} is none of {', '.join(ENGINES)}")
        if not SERVED_NAME.match(self.served_model_name or ""):
            raise InvalidLaunch(
                f"served_model_name {self.served_model_name!r}: one or two '/'-separated names of letters, digits, "
                "'.', '_' and '-', each starting with a letter or digit"
            )
        if not _DEVICE.match(self.device):
            raise InvalidLaunch(f"device {self.device!r} is neither 'cpu' nor 'cuda:N'")
        if self.simulated and self.device != "cpu":
            raise InvalidLaunch("a simulated chip serves on the CPU (device 'cpu')")
        if self.engine == ENGINE_VLLM and self.device == "cpu":
            raise InvalidLaunch("vLLM serves on CUDA devices only; the CPU and simulated chips use 'transformers'")
        if not 0 < self.port < 65536:
            raise InvalidLaunch(f"port {self.port} is outside 1..65535")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise InvalidLaunch("max_model_len must leave room for a prompt and an answer (at least 2 tokens)")
        if not self.model:
            raise InvalidLaunch("no model to serve")
        return self


def default_engine(device: str, simulated: bool = False) -> str:
    """The engine a host serves with: vLLM on a real CUDA device, transformers' own server elsewhere."""
    return ENGINE_VLLM if device.startswith("cuda") and not simulated else ENGINE_TRANSFORMERS


@dataclass(frozen=True)
class EngineStatus:
    """What the agent reports about one replica's engine."""

    deployment_id: int
    replica: int
    state: str
    engine: str
    served_model_name: str
    url: str  # the OpenAI-compatible base URL, ".../v1"
    pid: int | None
    simulated: bool
    device: str
    exit_code: int | None = None
    error: str = ""  # why it failed: the engine's last log lines

    def as_dict(self) -> dict:
        return asdict(self)
