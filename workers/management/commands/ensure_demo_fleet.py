"""Prepare the local demo fleet: an enrollment token per agent, handed over in a private file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from base.tokens import hash_token
from fleet.models import Node, Pool
from kernel.protocol import AGENT_STATE_FILE
from workers.models import EnrollmentToken
from workers.services.node_lifecycle import reset_node

# hostname, chip type, chips, spot-eligible: three chip types, small enough for a 2-core laptop.
DEMO_FLEET = [
    ("demo-rtx-4090-a", "rtx-4090", 1, False),
    ("demo-rtx-4090-b", "rtx-4090", 1, True),
    ("demo-tpu-v5e", "tpu-v5e", 1, True),
    ("demo-ascend-910b", "ascend-910b", 1, False),
]
TOKEN_FILE = "enrollment-token"


class Command(BaseCommand):
    help = (
        "Write <data dir>/demo-fleet.json (the simulated agents `make run` starts) and each agent's "
        "enrollment token into <data dir>/agents/<host>/enrollment-token (mode 0600)."
    )

    def handle(self, *args, **options) -> None:
        data_dir = Path(settings.DATA_DIR)
        path = data_dir / "demo-fleet.json"
        known = {entry["hostname"]: entry for entry in json.loads(path.read_text())} if path.exists() else {}
        fleet = []
        for hostname, chip, chips, spot in DEMO_FLEET:
            entry = self._entry(known.get(hostname), data_dir / "agents" / hostname, hostname, chip, chips, spot)
            fleet.append(entry)
        path.write_text(json.dumps(fleet, indent=2))
        path.chmod(0o600)
        self.stdout.write(f"Demo fleet: {len(fleet)} simulated agents ({path})")

    def _entry(self, known: dict | None, agent_dir: Path, hostname: str, chip: str, chips: int, spot: bool) -> dict:
        """The agent's entry; a fresh single-use token approving its chips when it will need to enroll."""
        node = Node.objects.filter(hostname=hostname).first()
        if node is not None and node.approved_chips != chips:
            Node.objects.filter(pk=node.pk).update(approved_chips=chips)  # the operator approves what the demo runs
        holds_its_token = node is not None and node.token_hash and node.token_hash == _saved_token_hash(agent_dir)
        if known and (holds_its_token or (_usable(known["token"]) and (node is None or not node.token_hash))):
            entry = known
        else:
            if node is not None and node.token_hash and not holds_its_token:
                reset_node(node.pk, by="make run (the demo agent lost its node token)")
            pool = Pool.objects.filter(chip_type__slug=chip).order_by("pk").first()
            _, raw = EnrollmentToken.issue(pool, chips=chips, name=f"demo fleet: {hostname}")
            entry = {"hostname": hostname, "chip": chip, "chips": chips, "spot": spot, "token": raw}
        entry["token_file"] = str(write_private(agent_dir / TOKEN_FILE, entry["token"]))
        return entry


def _usable(raw: str) -> bool:
    token = EnrollmentToken.objects.filter(token_hash=hash_token(raw)).first()
    return token is not None and token.is_usable


def _saved_token_hash(agent_dir: Path) -> str | None:
    """The hash of the node token the agent saved, if any."""
    try:
        token = json.loads((agent_dir / AGENT_STATE_FILE).read_text()).get("node_token")
    except (OSError, ValueError):
        return None
    return hash_token(token) if token else None


def write_private(path: Path, secret: str) -> Path:
    """Write a secret readable only by this user (folder 0700, file 0600), created with that mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    return path
