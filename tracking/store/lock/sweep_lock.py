"""One driver per sweep name and store, the lock held in the store itself, so it holds across hosts and
on any backend MLflow writes to (SQLite, PostgreSQL, a tracking server).

Each driver files a claim: a run in the experiment `<experiment>.locks` (kept out of the sweeps' own
experiment, its runs and UI), tagged with the sweep, its host, its pid and a heartbeat the driver
renews every HEARTBEAT_S. MLflow has no compare-and-set, so a claim decides by looking: alone, it holds
the lock; beside a claim that holds it, it is refused, naming that driver's host and pid; beside claims
still deciding (two drivers started together), the claim with the smallest run id waits for the others
to withdraw and the rest withdraw at once, so exactly one goes on. A claim is dead, and ignored, once
its heartbeat is older than STALE_S, or at once where its host is this one and its pid is gone (a
driver killed with SIGKILL): it never blocks the next driver.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from tracking.store.connect import TrackingError, _fail_fast_http
from tracking.store.search import search

HEARTBEAT_S = 10.0  # how often a holder renews its claim
STALE_S = 120.0  # a claim not renewed this long is a dead driver's (allows for clocks a minute apart)
DECIDE_S = 15.0  # how long the smallest of several deciding claims waits for the others to withdraw
LOCKS_SUFFIX = ".locks"
SWEEP, HOST, PID, BEAT, STATE = "lock_sweep", "lock_host", "lock_pid", "lock_heartbeat", "lock_state"
HELD, CLAIMING = "held", "claiming"


class SweepLocked(TrackingError):
    """Another driver runs this sweep on this store: one line naming it, before Ray starts."""


class SweepLock:
    def __init__(
        self,
        client,
        experiment: str,
        sweep: str,
        stale_s: float = STALE_S,
        beat_s: float = HEARTBEAT_S,
        answers=lambda: True,
    ):
        """`answers`: whether the store takes a write now (Recorder.answers, a server's health probe): a store
        that stopped answering is not asked at all, so its client's retries never stall or clutter the end."""
        self.client, self.experiment, self.sweep, self.answers = client, experiment, sweep, answers
        self.stale_s, self.beat_s = stale_s, beat_s
        self.run_id: str | None = None
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None

    def acquire(self) -> SweepLock:
        """Hold the lock, with its heartbeat running; SweepLocked (one line) where another driver holds it."""
        self.experiment_id = self._locks_experiment()
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"lock {self.sweep}",
            tags={
                SWEEP: self.sweep,
                HOST: socket.gethostname(),
                PID: str(os.getpid()),
                BEAT: f"{time.time():.3f}",
                STATE: CLAIMING,
            },
        )
        self.run_id = run.info.run_id
        deadline = time.monotonic() + DECIDE_S
        while True:
            others = [c for c in self._live_claims() if c.info.run_id != self.run_id]
            holder = next((c for c in others if c.data.tags.get(STATE) == HELD), None)
            if not others:
                self.client.set_tag(self.run_id, STATE, HELD)
                self._beating = threading.Thread(target=self._beat, name="sweep-lock-heartbeat", daemon=True)
                self._beating.start()
                return self
            if holder or min(c.info.run_id for c in others) < self.run_id or time.monotonic() > deadline:
                self._withdraw()
                raise SweepLocked(self._refusal(holder or min(others, key=lambda c: c.info.run_id)))
            time.sleep(0.2)  # the smallest claim: the others withdraw on seeing it

    def release(self) -> None:
        """The claim withdrawn (the sweep ended, failed or was interrupted); a store that does not answer
        leaves it to go stale."""
        self._stop.set()
        if self._beating is not None:
            self._beating.join(timeout=5)
        self._withdraw()

    def _refusal(self, claim) -> str:
        tags = claim.data.tags
        age = max(0.0, time.time() - float(tags.get(BEAT, 0)))
        return (
            f"sweep {self.sweep!r} is running on this store from host {tags.get(HOST)} pid {tags.get(PID)} "
            f"(heartbeat {age:.0f} s ago): wait for it to end, or stop it; a killed driver's claim lapses after "
            f"{self.stale_s:.0f} s"
        )

    def _withdraw(self) -> None:
        if self.run_id is None or not self.answers():
            self.run_id = None
            return
        try:
            with _fail_fast_http():  # a dead server: given up in about a second, not minutes of back-off
                self.client.delete_run(self.run_id)
        except Exception:  # noqa: BLE001 - a store gone: the claim goes stale by its heartbeat
            pass
        self.run_id = None

    def _beat(self) -> None:
        while not self._stop.wait(self.beat_s):
            if not self.answers():
                continue
            try:
                with _fail_fast_http():
                    self.client.set_tag(self.run_id, BEAT, f"{time.time():.3f}")
            except Exception:  # noqa: BLE001 - a store that stopped answering: the journal keeps the results
                pass

    def _locks_experiment(self) -> str:
        name = self.experiment + LOCKS_SUFFIX
        found = self.client.get_experiment_by_name(name)
        if found:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:  # noqa: BLE001 - another driver created it at the same moment
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _live_claims(self) -> list:
        claims = search(self.client, self.experiment_id, f"tags.{SWEEP} = '{self.sweep}'")
        return [c for c in claims if c.info.run_id == self.run_id or self._alive(c.data.tags)]

    def _alive(self, tags: dict) -> bool:
        """A claim whose heartbeat is recent, unless it is this host's and its pid is gone."""
        try:
            if time.time() - float(tags.get(BEAT, 0)) > self.stale_s:
                return False
            if tags.get(HOST) == socket.gethostname():
                os.kill(int(tags.get(PID, 0)), 0)
        except ProcessLookupError:
            return False
        except (ValueError, PermissionError, OverflowError):
            pass  # a pid we may not signal lives; a beat that is not a number is judged by the pid alone
        return True
