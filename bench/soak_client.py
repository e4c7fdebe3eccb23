"""One soak client process (spawned by `bench.soak`; httpx only, no Django).

A client keeps a handful of instances of the soak workflow alive and drives them over HTTP,
each request `?sync=true` or asynchronous (202) at random, until it has had `quota` transitions
accepted or the run ends. Every request body carries a marker unique to the request. The client
writes one JSON line per outcome that matters to the checks:

- `accepted`: 200 (sync) or 202 (async): the runtime promised to apply it, exactly once;
- `unknown`: the answer was lost (a transport error after the request was sent, or a 5xx): it
  may or may not have been applied, at most once;
- `probe`: a deliberate resource-lock conflict (see below) and what it got.

Refusals (409 Busy, 400 not available here, ...) are not accepted and are only counted. A
connection that could not be opened sent nothing. After anything but a sync 200 the client
reads the instance again before choosing its next transition.

The lock probe: while one of its instances holds its lock (state `locked`), the client starts
another instance with the same `lockKey` and fires `lock` on it. Sync, it must get 409
`ResourceLockConflict`; async, it is accepted (202) and its job must fault the instance with
that code. Either way the second instance ends Faulted, as the seed prescribes.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

import httpx

PATH = "/api/v1/soak/workflows/soak-flow/instances"
# Where each client transition leads when it ran in the request (see bench.soak_workflows).
SYNC_TARGETS = {
    "work": "working",
    "rest": "idle",
    "lock": "locked",
    "unlock": "idle",
    "sleep": "sleeping",
    "poke": "idle",
    "chain": "idle",
}
FINISHING = ("finish", "finish-locked")
IDLE_CHOICES = ("work", "lock", "sleep", "chain")
IDLE_WEIGHTS = (30, 20, 20, 30)
PROBE_CHANCE = 0.04
POKE_CHANCE = 0.35
BUSY = "Instance:100031"
LOCK_CONFLICT = "ResourceLockConflict"


@dataclass
class ClientConfig:
    """What one client is told by the soak."""

    index: int
    base_url: str
    token: str
    quota: int
    deadline: float  # wall clock (time.time())
    log_path: str
    summary_path: str
    instances: int = 6
    seed: int = 0


@dataclass
class Tracked:
    """One instance the client drives."""

    id: str
    lock_key: str
    state: str | None = None  # None: read it before choosing
    not_before: float = 0.0
    accepted: int = 0
    finish_after: int = 20
    frozen: bool = False  # holds the lock a probe is testing: left alone meanwhile
    probe_of: str | None = None  # a probe instance: the holder it contends with


@dataclass
class ClientSummary:
    """Counts the soak adds up; the JSON lines hold the details."""

    index: int
    accepted: int = 0
    accepted_starts: int = 0
    unknown: int = 0
    requests: int = 0
    reads: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    # Wall-clock times of transport errors and 5xx answers (the PG restart window).
    error_times: list[float] = field(default_factory=list)
    faults_seen: list[str] = field(default_factory=list)
    finished_instances: int = 0
    started_at: float = 0.0
    ended_at: float = 0.0


class Client:
    """The loop of one client process."""

    def __init__(self, config: ClientConfig, progress: Synchronized[int], stop: Event) -> None:
        self.config = config
        self.progress = progress
        self.stop = stop
        self.random = random.Random(config.seed or config.index)
        self.summary = ClientSummary(config.index)
        self.refusals: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.tracked: dict[str, Tracked] = {}
        self.sequence = 0
        self.consecutive_errors = 0
        self.probing = False
        self.log = open(config.log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self.http = httpx.Client(
            base_url=config.base_url,
            headers={"Authorization": f"Token {config.token}"},
            timeout=httpx.Timeout(30.0, connect=5.0),
        )

    # --- the loop -------------------------------------------------------------------------------

    def run(self) -> ClientSummary:
        """Drive instances until the quota, the deadline or the soak's stop."""
        self.summary.started_at = time.time()
        try:
            while not self._done():
                if len([t for t in self.tracked.values() if t.probe_of is None]) < (
                    self.config.instances
                ):
                    self._start()
                    continue
                tracked = self._pick()
                if tracked is None:
                    time.sleep(0.02)
                    continue
                self._step(tracked)
        finally:
            self.summary.ended_at = time.time()
            self.summary.refusals = dict(self.refusals)
            self.summary.errors = dict(self.errors)
            self.http.close()
            self.log.close()
        return self.summary

    def _done(self) -> bool:
        return (
            self.summary.accepted >= self.config.quota
            or time.time() >= self.config.deadline
            or self.stop.is_set()
        )

    def _pick(self) -> Tracked | None:
        now = time.monotonic()
        ready = [t for t in self.tracked.values() if not t.frozen and t.not_before <= now]
        return self.random.choice(ready) if ready else None

    def _step(self, tracked: Tracked) -> None:
        if tracked.state is None and not self._read(tracked):
            return
        if tracked.probe_of is not None:
            return  # a probe is only read until its job has settled (see _read)
        transition = self._choose(tracked)
        if transition is None:
            return
        if transition == "probe":
            self._probe(tracked)
            return
        self._fire(tracked, transition)

    def _choose(self, tracked: Tracked) -> str | None:
        state = tracked.state
        finishing = tracked.accepted >= tracked.finish_after
        if state == "idle":
            if finishing:
                return "finish"
            return self.random.choices(IDLE_CHOICES, IDLE_WEIGHTS)[0]
        if state == "working":
            return "rest"
        if state == "locked":
            if finishing:
                return "finish-locked"
            if not self.probing and self.random.random() < PROBE_CHANCE:
                return "probe"
            return "unlock"
        if state == "sleeping":
            if self.random.random() < POKE_CHANCE:
                return "poke"
            # Let the timer fire; look again later.
            tracked.state = None
            tracked.not_before = time.monotonic() + 0.4
            return None
        # Mid-chain (seen while its job runs) or unknown: look again later.
        tracked.state = None
        tracked.not_before = time.monotonic() + 0.2
        return None

    # --- requests -------------------------------------------------------------------------------

    def _marker(self) -> str:
        self.sequence += 1
        return f"c{self.config.index}-{self.sequence:07d}"

    def _send(
        self, method: str, url: str, body: dict[str, Any] | None = None
    ) -> tuple[httpx.Response | None, str, float]:
        """The answer, or None and why not: `not-sent` (no connection could be opened) or
        `lost:<error>` (the request may have reached the server)."""
        began = time.perf_counter()
        self.summary.requests += 1
        try:
            answer = self.http.request(method, url, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return None, f"not-sent:{type(exc).__name__}", time.perf_counter() - began
        except httpx.TransportError as exc:
            return None, f"lost:{type(exc).__name__}", time.perf_counter() - began
        return answer, "", time.perf_counter() - began

    def _trouble(self, kind: str) -> None:
        """A transport error or a 5xx: count it, note when, back off a little."""
        self.errors[kind] += 1
        self.summary.error_times.append(time.time())
        self.consecutive_errors += 1
        time.sleep(min(0.1 * 2 ** min(self.consecutive_errors, 5), 2.0))

    def _write(self, record: dict[str, Any]) -> None:
        self.log.write(json.dumps(record, separators=(",", ":")) + "\n")

    @staticmethod
    def _code(answer: httpx.Response) -> str:
        try:
            body = answer.json()
        except ValueError:
            return ""
        return str(body.get("errorCode") or "") if isinstance(body, dict) else ""

    def _read(self, tracked: Tracked) -> bool:
        """Read the instance's status and state; True when it may be driven now."""
        self.summary.reads += 1
        answer, error, _ = self._send("GET", f"{PATH}/{tracked.id}")
        if answer is None or answer.status_code >= 500:
            self._trouble(error or f"read:{answer.status_code if answer else ''}")
            return False
        self.consecutive_errors = 0
        if answer.status_code == 404:
            # An accepted start's instance is inserted before its answer: the checks report it.
            self._write({"k": "missing", "instance": tracked.id})
            self.refusals["read:404"] += 1
            self.tracked.pop(tracked.id, None)
            return False
        if answer.status_code != 200:
            self.refusals[f"read:{answer.status_code}:{self._code(answer)}"] += 1
            tracked.not_before = time.monotonic() + 0.5
            return False
        metadata = answer.json()["metadata"]
        status, state = metadata["status"], metadata["currentState"]
        if tracked.probe_of is not None:
            return self._probe_settled(tracked, status, state)
        if status == "B":
            tracked.not_before = time.monotonic() + self.random.uniform(0.05, 0.3)
            return False
        if status == "C":
            self.summary.finished_instances += 1
            self.tracked.pop(tracked.id, None)
            return False
        if status != "A":
            # Faulted (or suspended) without a probe: the soak's checks report it.
            self.summary.faults_seen.append(tracked.id)
            self._write({"k": "fault_seen", "instance": tracked.id, "status": status})
            self.tracked.pop(tracked.id, None)
            return False
        tracked.state = state
        return True

    def _record(
        self,
        kind: str,
        *,
        op: str,
        mode: str,
        instance: str | None,
        transition: str,
        marker: str,
        status: int | None,
        latency: float,
        **extra: Any,
    ) -> None:
        self._write(
            {
                "k": kind,
                "op": op,
                "mode": mode,
                "instance": instance,
                "transition": transition,
                "marker": marker,
                "status": status,
                "lat": round(latency, 5),
                "t": round(time.time(), 3),
                **extra,
            }
        )

    def _start(self, lock_key: str | None = None, probe_of: str | None = None) -> Tracked | None:
        """Start an instance (sync or async at random); None when it was not accepted."""
        marker = self._marker()
        key = lock_key or f"soak:{self.config.index}:{uuid.uuid4().hex}"
        sync = self.random.random() < 0.5 or probe_of is not None
        mode = "sync" if sync else "async"
        url = f"{PATH}/start" + ("?sync=true" if sync else "")
        answer, error, latency = self._send(
            "POST", url, {"attributes": {"marker": marker, "lockKey": key}}
        )
        if answer is None or answer.status_code >= 500:
            kind = error or f"http:{answer.status_code if answer else ''}"
            if not kind.startswith("not-sent"):
                self._record(
                    "unknown", op="start", mode=mode, instance=None, transition="start",
                    marker=marker, status=answer.status_code if answer else None,
                    latency=latency, error=kind,
                )  # fmt: skip
                self.summary.unknown += 1
            self._trouble(kind)
            return None
        self.consecutive_errors = 0
        if answer.status_code not in (200, 202):
            self.refusals[f"start:{answer.status_code}:{self._code(answer)}"] += 1
            time.sleep(0.2)
            return None
        body = answer.json()
        instance_id = str(body["id"])
        self._record(
            "accepted", op="start", mode=mode, instance=instance_id, transition="start",
            marker=marker, status=answer.status_code, latency=latency,
            result=body.get("status"),
        )  # fmt: skip
        self.summary.accepted_starts += 1
        tracked = Tracked(
            id=instance_id,
            lock_key=key,
            state="idle" if answer.status_code == 200 and body.get("status") == "A" else None,
            finish_after=self.random.randint(8, 40),
            probe_of=probe_of,
        )
        self.tracked[instance_id] = tracked
        return tracked

    def _fire(
        self, tracked: Tracked, transition: str, *, probe: bool = False
    ) -> tuple[httpx.Response | None, str]:
        """Fire `transition`; the answer (None when lost) and the request's marker."""
        marker = self._marker()
        sync = self.random.random() < 0.5
        mode = "sync" if sync else "async"
        url = f"{PATH}/{tracked.id}/transitions/{transition}" + ("?sync=true" if sync else "")
        answer, error, latency = self._send("PATCH", url, {"attributes": {"marker": marker}})
        tracked.state = None
        if answer is None or answer.status_code >= 500:
            kind = error or f"http:{answer.status_code if answer else ''}"
            if not kind.startswith("not-sent"):
                self._record(
                    "unknown", op="transition", mode=mode, instance=tracked.id,
                    transition=transition, marker=marker,
                    status=answer.status_code if answer else None, latency=latency, error=kind,
                    probe=probe,
                )  # fmt: skip
                self.summary.unknown += 1
            self._trouble(kind)
            return answer, marker
        self.consecutive_errors = 0
        code = answer.status_code
        if code in (200, 202):
            body = answer.json()
            self._record(
                "accepted", op="transition", mode=mode, instance=tracked.id,
                transition=transition, marker=marker, status=code, latency=latency,
                result=body.get("status"), probe=probe,
            )  # fmt: skip
            tracked.accepted += 1
            self.summary.accepted += 1
            with self.progress.get_lock():
                self.progress.value += 1
            if transition in FINISHING and code == 200 and body.get("status") == "C":
                self.summary.finished_instances += 1
                self.tracked.pop(tracked.id, None)
            elif code == 200 and body.get("status") == "A" and transition in SYNC_TARGETS:
                tracked.state = SYNC_TARGETS[transition]
            else:
                tracked.not_before = time.monotonic() + 0.05
            return answer, marker
        error_code = self._code(answer)
        self.refusals[f"{transition}:{code}:{error_code}"] += 1
        pause = 0.1 if error_code == BUSY else 0.02
        tracked.not_before = time.monotonic() + pause
        if error_code == LOCK_CONFLICT and not probe:
            # Not a probe: someone else holds this instance's own key. The checks report it.
            self._write({"k": "unexpected_conflict", "instance": tracked.id, "marker": marker})
        return answer, marker

    # --- the lock probe -------------------------------------------------------------------------

    def _probe(self, holder: Tracked) -> None:
        """Contend for `holder`'s lock with a new instance (see the module docstring)."""
        holder.frozen = True
        self.probing = True
        contender = self._start(lock_key=holder.lock_key, probe_of=holder.id)
        if contender is None:
            holder.frozen = False
            self.probing = False
            return
        if contender.state != "idle" and not self._wait_idle(contender):
            self._probe_done(contender, "start-not-settled")
            return
        answer, marker = self._fire(contender, "lock", probe=True)
        outcome: str
        if answer is None or answer.status_code >= 500:
            outcome = "unknown"
        elif answer.status_code == 409 and self._code(answer) == LOCK_CONFLICT:
            outcome = "conflict-409"
        elif answer.status_code == 202:
            self._write({"k": "probe", "instance": contender.id, "holder": holder.id,
                         "marker": marker, "outcome": "accepted-async"})  # fmt: skip
            contender.not_before = time.monotonic() + 0.1
            return  # settled by _read -> _probe_settled
        elif answer.status_code == 200:
            outcome = f"acquired:{answer.json().get('status')}"
        else:
            outcome = f"refused:{answer.status_code}:{self._code(answer)}"
        self._write({"k": "probe", "instance": contender.id, "holder": holder.id,
                     "marker": marker, "outcome": outcome})  # fmt: skip
        self._probe_done(contender, outcome)

    def _wait_idle(self, contender: Tracked) -> bool:
        for _ in range(300):
            if self._done():
                return False
            answer, _, _ = self._send("GET", f"{PATH}/{contender.id}")
            if answer is not None and answer.status_code == 200:
                metadata = answer.json()["metadata"]
                if metadata["status"] == "A" and metadata["currentState"] == "idle":
                    return True
            time.sleep(0.1)
        return False

    def _probe_settled(self, contender: Tracked, status: str, state: str) -> bool:
        if status == "B":
            contender.not_before = time.monotonic() + 0.2
            return False
        self._write({"k": "probe_settled", "instance": contender.id, "status": status,
                     "state": state})  # fmt: skip
        self._probe_done(contender, f"settled:{status}:{state}")
        return False

    def _probe_done(self, contender: Tracked, outcome: str) -> None:
        self.tracked.pop(contender.id, None)
        holder = self.tracked.get(contender.probe_of or "")
        if holder is not None:
            holder.frozen = False
            holder.state = None
        self.probing = False


def run(config: ClientConfig, progress: Synchronized[int], stop: Event) -> None:
    """A client process's entry point: drive, then write the summary file."""
    summary = Client(config, progress, stop).run()
    with open(config.summary_path, "w", encoding="utf-8") as handle:
        json.dump(asdict(summary), handle)
