"""The folders a sweep keeps files in (the trials' workdir, the cache folder) are the user's alone: made 0700,
refused in one line where another user owns them, could write in them or could redirect the way to them, on the
driver and on the node alike; a sweep's trial folders belong to one store and experiment. Unit-level: no Ray
started, no sweep run."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from sweeps.execution.execute import store_tag
from sweeps.execution.schedule import crossed_failure
from sweeps.execution.task import sweep_folder
from sweeps.planning.config import SweepConfig, SweepSettings, TrackingSettings
from sweeps.planning.settings import prepare_workdir
from sweeps.pricing.estimate import hardware
from tokengen.contract.machine.user_folders import CACHE_VARIABLE, FolderRefused, cache_folder, workdir
from tokengen.contract.spec import SpecError

OTHER = 65534  # nobody
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing a folder to another user needs root")
FIX = "give a folder of your own, e.g. sweep.workdir=~/.cache/tokengen/sweeps"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def node_settings(work: str | None) -> SweepSettings:
    return SweepSettings(name="s", workdir=work, trial_timeout_s=60, retries=0, cpus_per_trial=1, inductor_cache="cold")


def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A workdir as another user leaves it in a shared /tmp: theirs (no one else may write in it, but they can),
    with a trial's log planted as a link to a file of ours outside it."""
    victim = tmp_path / "victim"
    victim.write_text("ours")
    work = tmp_path / "work"
    trial = work / "s" / "k"
    trial.mkdir(parents=True)
    (trial / "trial.log").symlink_to(victim)
    for path in (work, work / "s", trial):
        os.chown(path, OTHER, OTHER)
        path.chmod(0o755)
    return work, victim


@as_root
def test_a_workdir_planted_by_another_user_is_refused_on_the_driver_and_the_node_and_nothing_outside_changes(tmp_path):
    work, victim = planted(tmp_path)
    line = f"sweep.workdir={work} is owned by uid {OTHER}, not you (uid 0): {FIX}"
    with pytest.raises(SpecError) as driver:
        prepare_workdir(str(work))
    assert str(driver.value) == line
    with pytest.raises(FolderRefused) as node:
        sweep_folder(node_settings(str(work)))
    assert str(node.value) == line
    failed = crossed_failure(node.value)  # as the trial's failure, once it has crossed Ray
    assert (failed["error_type"], failed["error_message"]) == ("FolderRefused", line)
    assert victim.read_text() == "ours" and sorted(p.name for p in work.rglob("*")) == ["k", "s", "trial.log"]


def test_a_workdir_or_a_folder_above_it_others_or_the_group_can_write_is_refused_in_one_line(tmp_path):
    for shared, who in ((0o777, "group and others (mode 0777)"), (0o1777, "group and others (mode 1777)")):
        work = tmp_path / f"work-{shared:o}"
        work.mkdir()
        work.chmod(shared)
        with pytest.raises(SpecError) as refused:
            prepare_workdir(str(work))
        assert str(refused.value) == (
            f"sweep.workdir={work} is writable by {who}: make it yours alone (chmod 700 {work}) or {FIX}"
        )
    (tmp_path / "group").mkdir(mode=0o700)
    (tmp_path / "group").chmod(0o770)
    with pytest.raises(FolderRefused, match=r"is writable by group \(mode 0770\)"):
        workdir(str(tmp_path / "group"))
    (tmp_path / "open" / "work").mkdir(parents=True, mode=0o700)  # ours, in a folder anyone may rename it in
    (tmp_path / "open").chmod(0o777)
    with pytest.raises(FolderRefused) as above:
        workdir(str(tmp_path / "open" / "work"))
    assert str(above.value) == (
        f"sweep.workdir={tmp_path}/open/work: {tmp_path}/open is writable by group and others (mode 0777) without "
        f"the sticky bit: {FIX}"
    )


@as_root
def test_a_way_to_the_workdir_another_user_controls_is_refused(tmp_path):
    """A folder above it that is theirs (they could move ours away and put a link in its place), and a link of
    theirs on the way to a folder of ours (they could point it elsewhere later)."""
    theirs = tmp_path / "theirs"
    (theirs / "work").mkdir(parents=True)
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(FolderRefused) as above:
        workdir(str(theirs / "work"))
    assert str(above.value) == (
        f"sweep.workdir={theirs}/work: {theirs} is owned by uid {OTHER}, not you (uid 0) or root: {FIX}"
    )
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(ours)
    os.lchown(link, OTHER, OTHER)
    with pytest.raises(FolderRefused, match=f"{link} is a link owned by uid {OTHER}, not you"):
        workdir(str(link))
    os.lchown(link, 0, 0)
    assert workdir(str(link)) == link  # a link of our own is followed


def test_the_default_workdir_is_in_the_users_cache_folder_made_0700_and_vars_expand_where_it_is_resolved(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    assert workdir(None) == tmp_path / "cache" / "sweeps"
    assert mode(tmp_path / "cache") == mode(tmp_path / "cache" / "sweeps") == 0o700
    monkeypatch.delenv(CACHE_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert workdir(None) == tmp_path / "xdg" / "tokengen" / "sweeps"
    monkeypatch.setenv("NODE_DISK", str(tmp_path / "disk"))  # each node's own value, read on the node
    assert sweep_folder(node_settings("$NODE_DISK/work")) == tmp_path / "disk" / "work" / "s"
    assert {mode(p) for p in (tmp_path / "disk", tmp_path / "disk" / "work", tmp_path / "disk" / "work" / "s")} == {
        0o700
    }


def test_a_sweep_folder_belongs_to_one_store_and_experiment_and_is_found_again(tmp_path, monkeypatch):
    def folder(uri: str, experiment: str = "tokengen") -> Path:
        config = SweepConfig(tracking=TrackingSettings(uri=uri, experiment=experiment))
        store = store_tag(config.tracking.uri, config.tracking.experiment)
        return sweep_folder(dataclasses.replace(config.sweep, workdir=str(tmp_path)), store)

    a, b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    assert folder(a) == folder(a) and folder(a).parent == tmp_path and folder(a).name.startswith("sweep-")
    assert len({folder(a), folder(b), folder(a, "other"), folder("http://host:5000")}) == 4
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    monkeypatch.chdir(tmp_path / "one")
    here = folder("sqlite:///mlflow.db")
    monkeypatch.chdir(tmp_path / "two")
    assert folder("sqlite:///mlflow.db") != here  # the same relative URI in two folders: two stores


@as_root
def test_the_cache_folder_goes_through_the_same_resolver(tmp_path, monkeypatch):
    """A cache folder another user owns is refused like a workdir; the calibration then neither reads a
    measurement planted there nor writes beside it: it measures again."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "cpu_speed.json").write_text('{"forged": {}}')
    os.chown(cache, OTHER, OTHER)
    monkeypatch.setenv(CACHE_VARIABLE, str(cache))
    with pytest.raises(FolderRefused, match=rf"^\${CACHE_VARIABLE}={cache} is owned by uid {OTHER}, not you"):
        cache_folder()
    assert hardware.kept_file().parent != cache and hardware._entries() == {}
    os.chown(cache, 0, 0)
    assert hardware.kept_file() == cache / "cpu_speed.json" and hardware._entries() == {"forged": {}}
