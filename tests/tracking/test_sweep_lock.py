"""One driver per sweep name and store (tracking/store/lock/sweep_lock.py): the lock lives in the store, so
a second driver of the same sweep is refused in one line naming the first one's host and pid; claims
filed at the same moment leave exactly one holder; a claim whose driver was killed (its pid gone, or its
heartbeat stale) never blocks the next; two real drivers started together record each key once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from servers import seeded_uri
from sweep_helpers import child_runs, driver_command, driver_environment, joining_warm_ray

from tracking.store.lock.sweep_lock import BEAT, CLAIMING, HOST, LOCKS_SUFFIX, PID, STATE, SWEEP, SweepLock, SweepLocked
from tracking.store.recorder import Recorder


@pytest.fixture
def client(tmp_path):
    return Recorder(seeded_uri(tmp_path), "tokengen").client


def claim(client, host: str, pid: int, beat: float, state: str = "held") -> None:
    """A claim as another driver files it."""
    found = client.get_experiment_by_name("tokengen" + LOCKS_SUFFIX)
    experiment = found.experiment_id if found else client.create_experiment("tokengen" + LOCKS_SUFFIX)
    client.create_run(experiment, tags={SWEEP: "s", HOST: host, PID: str(pid), BEAT: f"{beat:.3f}", STATE: state})


def test_a_second_driver_is_refused_naming_the_first_until_it_ends(client):
    first = SweepLock(client, "tokengen", "s").acquire()
    with pytest.raises(SweepLocked) as refused:
        SweepLock(client, "tokengen", "s").acquire()
    line = str(refused.value)
    assert line.startswith(
        f"sweep 's' is running on this store from host {socket.gethostname()} pid {os.getpid()} (heartbeat "
    ), line
    assert " s ago): wait for it to end, or stop it; a killed driver's claim lapses after 120 s" in line
    assert "\n" not in line
    SweepLock(client, "tokengen", "other").acquire().release()  # another sweep name: its own lock
    first.release()
    SweepLock(client, "tokengen", "s").acquire().release()


def test_claims_filed_together_leave_exactly_one_holder(client, monkeypatch):
    """Every claim files before any looks (the worst interleaving): the smallest holds, the rest withdraw."""
    locks = [SweepLock(client, "tokengen", "s") for _ in range(3)]
    filed = threading.Barrier(len(locks))
    create_run = client.create_run

    def create_then_wait(*args, **kwargs):
        run = create_run(*args, **kwargs)
        filed.wait(timeout=30)
        return run

    monkeypatch.setattr(client, "create_run", create_then_wait)
    outcomes = []

    def take(lock):
        try:
            outcomes.append(lock.acquire())
        except SweepLocked as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=take, args=(lock,)) for lock in locks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    held = [o for o in outcomes if isinstance(o, SweepLock)]
    assert len(held) == 1 and len(outcomes) == 3, outcomes
    held[0].release()


def test_a_killed_drivers_claim_does_not_block_the_next(client):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    claim(client, socket.gethostname(), gone.pid, time.time())  # this host, its pid gone: SIGKILLed
    claim(client, "node-7", 4242, time.time() - 3600)  # another host, no heartbeat for an hour
    claim(client, "node-8", 4343, time.time() - 3600, CLAIMING)
    SweepLock(client, "tokengen", "s").acquire().release()
    claim(client, "node-9", 4444, time.time())  # another host, beating: held
    with pytest.raises(SweepLocked, match="from host node-9 pid 4444"):
        SweepLock(client, "tokengen", "s").acquire()


@pytest.mark.slow
def test_two_drivers_of_one_sweep_started_together_record_each_key_once(tmp_path, warm_ray):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    command = driver_command(tmp_path, f"tracking.uri={uri}", *joining_warm_ray(), "grid.variant=[kv_cache]")
    drivers = [
        subprocess.Popen(
            command, cwd=tmp_path, env=driver_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outcomes = sorted((d.wait(timeout=180), d.stderr.read(), d.pid) for d in drivers)
    (ran, ran_err, ran_pid), (refused, refused_err, _) = outcomes
    assert (ran, refused) == (0, 2), ran_err[-3000:] + refused_err[-3000:]
    assert (
        refused_err.strip()
        .splitlines()[-1]
        .startswith(f"error: sweep 't' is running on this store from host {socket.gethostname()} pid {ran_pid} ")
    ), refused_err
    assert set(Counter(r.data.tags["trial_key"] for r in child_runs(uri)).values()) == {1}
