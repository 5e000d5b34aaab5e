"""The agent's main loop: enroll, long-poll for commands, run them, keep reporting.

The loop never dies of the network: any failure to reach the platform (down, restarting, 5xx)
is a jittered backoff and another try, while the ranks keep training and their reports wait in
the report queue. Only a situation no retry can fix (a refused node token and no enrollment
token to enroll again) ends the agent.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hosts.agent import AGENT_VERSION
from hosts.agent.client import Backoff, PlatformClient, Rejected, Transient, Unauthorized
from hosts.agent.commands import CommandExecutor, RankTable
from hosts.agent.devices import Inventory, detect, health
from hosts.agent.network import NodeAddress
from hosts.agent.ranks import DEFAULT_RANK_MODULE, Standbys
from hosts.agent.reporter import Reporter
from hosts.agent.state import AgentState
from kernel.protocol import ADDRESS_AUTO, MAX_POLL_WAIT_S

log = logging.getLogger(__name__)

MIN_POLL_S = 1.0  # a poll that returns empty sooner than this was not held: pause, don't spin
ENROLL_REFUSED_WAIT_S = 30.0


class AgentFatal(RuntimeError):
    """Nothing left to retry: the agent exits with this message."""


@dataclass
class AgentConfig:
    platform: str
    enrollment_token: str | None
    hostname: str
    data_dir: Path
    simulate: str | None = None
    chip_type: str | None = None
    spot: bool = False
    address: str = ADDRESS_AUTO  # or the address other nodes' ranks reach this host at (an IP or a DNS name)
    once: bool = False
    poll_wait_s: float = 20.0
    rank_module: str = DEFAULT_RANK_MODULE
    report_interval_s: float = 0.5
    default_grace_s: float = 30.0
    term_wait_s: float = 5.0
    log_rate: float = 50.0
    warm_ranks: int = 0  # CPU ranks kept started with torch imported, so a (re)start is quick


class Agent:
    """One node agent; `run()` blocks until `stop()` (or, with `once`, until idle)."""

    def __init__(self, config: AgentConfig, inventory: Inventory | None = None) -> None:
        self.config = config
        self.inventory = inventory or detect(config.simulate, config.chip_type)
        self.state = AgentState(config.data_dir)
        # Until the platform says (enrollment, every poll): the declared address, or the last one it recorded.
        self.node_address = NodeAddress(self._declared_address() or self.state.enrollment.get("address", ""))
        self.stop_event = threading.Event()
        self.backoff = Backoff()
        self.polls = 0
        self.poller = PlatformClient(config.platform)
        self.reporter = Reporter(
            PlatformClient(config.platform),
            lambda: self.state.node_token,
            self._on_stale,
            config.report_interval_s,
        )
        standbys = None
        if config.warm_ranks > 0 and config.rank_module == DEFAULT_RANK_MODULE:
            standbys = Standbys(config.warm_ranks, Path(config.data_dir) / "standby")
        self.ranks = RankTable(
            Path(config.data_dir),
            config.rank_module,
            self.reporter.put,
            config.log_rate,
            config.term_wait_s,
            standbys=standbys,
            network_env=self.node_address.rank_env,
            platform_url=config.platform,
        )
        self.executor = CommandExecutor(self.state, self.ranks, config.default_grace_s)

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        self.reporter.start()
        try:
            while not self.stop_event.is_set():
                if self.cycle() and self.config.once and not self.ranks.running():
                    break
        finally:
            self.shutdown()

    def cycle(self) -> bool:
        """Enroll if needed, poll once and run the commands; False if the platform wasn't reached."""
        token = self.state.node_token
        if token is None:
            token = self._enroll()
        elif self.state.declared != self._declaration():
            token = self._renew(token)
        if token is None:
            return False
        try:
            answer = self._poll(token, self._wait_s())
        except Unauthorized as exc:
            log.warning("node token refused (%s): enrolling again", exc)
            self.state.forget_token(token)
            self._need_enrollment_token()
            return False
        except (Transient, Rejected) as exc:
            log.warning("poll failed: %s", exc)
            self.backoff.wait(self.stop_event)
            return False
        self.backoff.reset()
        self.node_address.update(answer.get("address"))
        for command in answer.get("commands") or []:
            self.executor.handle(command)
        self.ranks.prune()
        return True

    def _wait_s(self) -> float:
        """The long-poll wait: ours, capped by what the platform suggested and the protocol max."""
        wait = min(self.config.poll_wait_s, MAX_POLL_WAIT_S)
        suggested = self.state.enrollment.get("poll_timeout_s")
        if isinstance(suggested, int | float) and suggested > 0:
            wait = min(wait, suggested)
        if self.config.once and self.ranks.running():
            wait = min(wait, 1.0)  # --once exits soon after its ranks do
        return wait

    def _poll(self, token: str, wait_s: float) -> dict:
        acks = self.state.pending_acks()
        body = {
            "health": {**health(self.inventory, self.ranks.running()), "warm_ranks": self.ranks.warm_ranks()},
            "acks": [ack["id"] for ack in acks],
            "ack_errors": [ack for ack in acks if ack["error"]],
            "ranks": self.ranks.states(),
            "wait_s": wait_s,
        }
        started = time.monotonic()
        answer = self.poller.poll(token, body)
        self.state.confirm_acks(acks)
        self.polls += 1
        if not answer.get("commands") and wait_s >= MIN_POLL_S and time.monotonic() - started < MIN_POLL_S:
            self.stop_event.wait(MIN_POLL_S)
        return answer

    def _need_enrollment_token(self) -> None:
        if not self.config.enrollment_token:
            raise AgentFatal("the platform refused this node's token and no enrollment token was given")

    def _declaration(self) -> dict:
        """What this host tells the platform about itself when it enrolls (no secrets), as saved in JSON."""
        declaration = {
            "hostname": self.config.hostname,
            **self.inventory.as_enrollment(),
            "spot_eligible": self.config.spot,
            "address": self._declared_address(),
            "agent_version": AGENT_VERSION,
        }
        return json.loads(json.dumps(declaration))

    def _declared_address(self) -> str:
        """The address this agent declares; "" asks the platform to record where it sees us."""
        return "" if self.config.address in ("", ADDRESS_AUTO) else self.config.address

    def _renew(self, token: str) -> str | None:
        """The host changed (chips, address, version...): re-enroll with the current node token.

        Refused (e.g. more chips than the operator approved): keep working as enrolled, say why once.
        """
        declaration = self._declaration()
        try:
            answer = self.poller.enroll({**declaration, "node_token": token})
        except Transient as exc:
            log.warning("re-enrollment failed, retrying: %s", exc)
            self.backoff.wait(self.stop_event)
            return None
        except (Unauthorized, Rejected) as exc:
            log.error("re-enrollment refused, going on as enrolled before: %s", exc)
            self.state.set_declared(declaration)
            return token
        self.state.set_enrollment(answer, declaration)
        self.node_address.update(answer.get("address"))
        log.info("re-enrolled as node %s with %s", answer.get("node_id"), declaration)
        return answer["node_token"]

    def _enroll(self) -> str | None:
        self._need_enrollment_token()
        declaration = self._declaration()
        try:
            answer = self.poller.enroll({**declaration, "enrollment_token": self.config.enrollment_token})
        except Transient as exc:
            log.warning("enrollment failed, retrying: %s", exc)
            self.backoff.wait(self.stop_event)
            return None
        except (Unauthorized, Rejected) as exc:
            if self.config.once:
                raise AgentFatal(f"enrollment refused: {exc}") from exc
            log.error("enrollment refused, retrying in %.0fs: %s", ENROLL_REFUSED_WAIT_S, exc)
            self.stop_event.wait(ENROLL_REFUSED_WAIT_S)
            return None
        self.backoff.reset()
        self.state.set_enrollment(answer, declaration)
        self.node_address.update(answer.get("address"))
        log.info(
            "enrolled as node %s in pool %s at %s (%s)",
            answer.get("node_id"),
            answer.get("pool"),
            answer.get("address") or "an address the platform didn't say",
            answer.get("address_source", "declared"),
        )
        return answer["node_token"]

    def _on_stale(self, job_id: int, epoch: int) -> None:
        """409 on a report: that epoch is over, so a newer one exists; kill its ranks now."""
        self.state.see_epoch(job_id, epoch + 1)
        self.ranks.kill(job_id, lambda e: e == epoch, wait=False)

    def shutdown(self) -> None:
        """End the ranks, deliver what they said (exits first of all), then a last ack poll."""
        self.stop_event.set()
        self.ranks.shutdown()
        self.reporter.stop(flush_s=5.0)
        token = self.state.node_token
        if token and self.state.pending_acks():
            try:
                self._poll(token, 0)
            except Exception as exc:  # best effort: the platform re-sends unacked commands
                log.info("final ack poll failed: %s", exc)
        self.poller.close()
        self.reporter.client.close()
