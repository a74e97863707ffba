"""The fingerprint covers the code that measures: a changed decode loop is another measurement, resume
measures it again and says what changed; the git commit is recorded beside it, outside the match."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid

from sweep_helpers import ROOT, small_sweep

from sweeps.delivery.journal import Journal
from sweeps.delivery.outbox import Outbox
from sweeps.planning.fingerprints import local_fingerprints
from sweeps.planning.grid import plan_sweep
from sweeps.planning.resume import trials_to_run
from tokengen.contract.machine.fingerprint import as_text, code_hash, facts, fingerprint
from tokengen.contract.trial_record import make_record
from tracking.store.recorder import Recorder

HASH = "from tokengen.contract.machine.fingerprint import code_hash; print(code_hash())"


def hash_of(copy) -> str:
    """code_hash() in a fresh Python that imports the project from `copy` (as a node's Ray copy would)."""
    out = subprocess.run(
        [sys.executable, "-c", HASH],
        cwd=copy,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


def test_the_code_hash_follows_the_measuring_files_not_their_place(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "tokengen", copy / "tokengen", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "sweeps" / "execution").mkdir(parents=True)
    for name in ("__init__.py", "execution/__init__.py", "execution/trial_process.py", "run.py"):
        shutil.copy(ROOT / "sweeps" / name, copy / "sweeps" / name)
    assert hash_of(copy) == code_hash(), "the same code in another place is the same measurement"
    with open(copy / "sweeps" / "run.py", "a") as handle:
        handle.write("\n# the driver is not what measures\n")
    assert hash_of(copy) == code_hash()
    loop = copy / "tokengen" / "decode" / "loop.py"
    loop.write_text(loop.read_text().replace("\nclass ", "\nimport time  # time.sleep(0.2) in every step\n\nclass ", 1))
    changed = hash_of(copy)
    assert changed != code_hash(), "a changed decode loop must change the fingerprint"
    trial_process = copy / "sweeps" / "execution" / "trial_process.py"
    trial_process.write_text(trial_process.read_text() + "\n# launched otherwise\n")
    assert hash_of(copy) not in (changed, code_hash())


def test_resume_measures_again_what_finished_with_other_code_and_names_the_change(tmp_path, capsys):
    config = small_sweep(tmp_path)
    plan = plan_sweep(config)
    expected = local_fingerprints(plan.trials, config.sweep.cpus_per_trial, config.ray.num_cpus)
    recorder = Recorder(config.tracking.uri, "tokengen")
    recorder.start_sweep("t", config, resume=False)
    old, same = plan.trials
    for trial, code in ((old, "0ldc0de"), (same, code_hash())):
        environment = {**facts("cpu", 2, "tiny"), "code": code}
        recorder.record_trial(
            make_record(
                trial.spec,
                key=trial.key,
                status="finished",
                attempt_id=uuid.uuid4().hex,
                env_fingerprint=fingerprint(environment),
                env_facts=as_text(environment),
            )
        )
    outbox = Outbox(Journal.open("tokengen", "t", root=tmp_path), recorder)
    capsys.readouterr()
    assert trials_to_run(plan, outbox, True, expected) == [old]
    line = capsys.readouterr().err.strip()
    assert line == (
        f"resume: skipping 1 trial(s) already finished in the experiment; measuring 1 again that "
        f"finished in another environment (code 0ldc0de vs {code_hash()})"
    )
