"""What the agent must remember across restarts: its node token, epochs seen, commands executed.

Why persist epochs and command ids: the platform re-sends a command until it is acked, and an
agent that restarted between executing a command and acking it must neither run it twice nor
accept a command from an epoch it already saw superseded. The file holds a credential, so it is
written 0600 and replaced atomically (a crash mid-write never leaves half a token).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

from kernel.protocol import AGENT_STATE_FILE

MAX_EXECUTED_IDS = 5000


def write_json_atomic(path: Path, data: dict, mode: int = 0o600) -> None:
    """Write to a temp file in the same folder, then rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class AgentState:
    """Thread-safe persisted state; every mutation is saved before it returns."""

    def __init__(self, data_dir: Path) -> None:
        Path(data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = Path(data_dir) / AGENT_STATE_FILE
        self._lock = threading.RLock()
        self._data: dict = {
            "node_token": None,
            "enrollment": {},
            "declared": None,  # what the host declared when it last enrolled (its agent re-enrolls on a change)
            "epochs": {},
            "executed": [],
            "acks": [],
        }
        if self.path.exists():
            self._data.update(json.loads(self.path.read_text()))

    def _save(self) -> None:
        write_json_atomic(self.path, self._data)

    # -- node token ---------------------------------------------------------------------------
    @property
    def node_token(self) -> str | None:
        with self._lock:
            return self._data["node_token"]

    @property
    def enrollment(self) -> dict:
        with self._lock:
            return dict(self._data["enrollment"])

    @property
    def declared(self) -> dict | None:
        with self._lock:
            return self._data["declared"]

    def set_enrollment(self, answer: dict, declared: dict | None = None) -> None:
        with self._lock:
            self._data["node_token"] = answer["node_token"]
            self._data["enrollment"] = {k: v for k, v in answer.items() if k != "node_token"}
            self._data["declared"] = declared
            self._save()

    def set_declared(self, declared: dict) -> None:
        """Don't ask again for a declaration the platform refused (until the host changes again)."""
        with self._lock:
            self._data["declared"] = declared
            self._save()

    def forget_token(self, token: str) -> None:
        """Drop the token the platform refused (unless another thread already replaced it)."""
        with self._lock:
            if self._data["node_token"] == token:
                self._data["node_token"] = None
                self._save()

    # -- epochs -------------------------------------------------------------------------------
    def newest_epoch(self, job_id: int) -> int | None:
        with self._lock:
            return self._data["epochs"].get(str(job_id))

    def see_epoch(self, job_id: int, epoch: int) -> None:
        """Remember `epoch` for the job if it is newer than anything seen."""
        with self._lock:
            current = self._data["epochs"].get(str(job_id))
            if current is None or epoch > current:
                self._data["epochs"][str(job_id)] = epoch
                self._save()

    # -- commands and acks --------------------------------------------------------------------
    def executed(self, command_id) -> bool:
        with self._lock:
            return command_id in self._data["executed"]

    def record(self, command_id, error: str | None = None) -> None:
        """Mark a command done (or refused, with `error`) and queue its ack."""
        with self._lock:
            executed = self._data["executed"]
            if command_id not in executed:
                executed.append(command_id)
                del executed[:-MAX_EXECUTED_IDS]
            self._data["acks"].append({"id": command_id, "error": error})
            self._save()

    def ack_again(self, command_id) -> None:
        """A re-sent command that already ran: ack it again (its ack may have been lost)."""
        with self._lock:
            if not any(a["id"] == command_id for a in self._data["acks"]):
                self._data["acks"].append({"id": command_id, "error": None})
                self._save()

    def pending_acks(self) -> list[dict]:
        with self._lock:
            return [dict(a) for a in self._data["acks"]]

    def confirm_acks(self, sent: list[dict]) -> None:
        """The platform took a poll carrying these acks; stop re-sending them."""
        ids = {a["id"] for a in sent}
        if not ids:
            return
        with self._lock:
            self._data["acks"] = [a for a in self._data["acks"] if a["id"] not in ids]
            self._save()
