"""The way in, for real: a small sweep run as a real driver process (local Ray, SQLite store) ends with
the project's own lines only, the light server's command and the URL of its comparison; `python -m
tracking.ui` serves that store with a real `mlflow server`, and headless chromium, given the URL,
renders the sweep's runs in the Model-training runs table, not the GenAI overview: grouped by variant,
the best speedup's group first, the figures at four significant digits, and in a 1600x1000 window the speedup,
its interval and the tokens and measurement verdicts first, all visible without scrolling. One sweep for the
whole module."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from mlflow import MlflowClient
from servers import free_port
from sweep_helpers import child_runs, driver_command, driver_environment

pytestmark = pytest.mark.slow  # starts Ray, an MLflow server and a browser

CHROMIUM = Path("/usr/bin/chromium")
URL = re.compile(
    r"^ui: this sweep's comparison: (http://127\.0\.0\.1:5000/#/experiments/(\d+)/runs\?"
    r"viewStateShareKey=tokengen-([0-9a-f]{32})&compareRunsMode=TABLE&workflowType=machine_learning)$"
)
OWN = ("resume:", "estimate:", "sweep t:", "report:", "ui:", "log:", "trials:", "journal:")
"""How every line the sweep itself writes to stderr begins (trials: is its progress bar)."""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-sweep")
    env = driver_environment()
    env.pop("RAY_AUTH_MODE", None)  # a user's shell has none; Ray started in this process set it here
    proc = subprocess.run(
        driver_command(tmp, seeded=False), cwd=tmp, env=env, capture_output=True, text=True, timeout=900
    )
    uri = f"sqlite:///{tmp}/mlflow.db"
    return SimpleNamespace(tmp=tmp, uri=uri, status=proc.returncode, out=proc.stdout, err=proc.stderr)


def lines(text: str) -> list[str]:
    return [line for line in re.split(r"[\r\n]+", text) if line.strip()]


def test_the_terminal_shows_the_projects_own_lines_only(swept):
    assert swept.status == 0, swept.err[-3000:]
    foreign = [line for line in lines(swept.err) if not line.startswith(OWN)]
    assert foreign == []  # no Ray INFO/WARNING lines, no MLflow database set-up
    assert lines(swept.err)[-1] == "log: Ray's and MLflow's own lines are in .sweeps/logs/tokengen/t.log"
    log = (swept.tmp / ".sweeps" / "logs" / "tokengen" / "t.log").read_text()
    for routine in (
        "Started a local Ray instance",
        "Token authentication is enabled",
        "Pushing file package",
        "Creating initial MLflow database tables",
        "Running upgrade",
    ):
        assert routine in log, routine


def test_the_sweep_ends_with_the_light_server_and_the_url(swept):
    ui = [line for line in lines(swept.err) if line.startswith("ui:")]
    assert ui[0] == (
        f"ui: serve the MLflow UI on this store: MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow server "
        f"--backend-store-uri {swept.uri} --host 127.0.0.1 --port 5000 --workers 1"
    )
    found = URL.match(ui[-1])
    assert found, ui[-1]
    parent = child_runs(swept.uri)[0].data.tags["mlflow.parentRunId"]
    assert found.group(3) == parent


def test_trial_runs_are_named_and_carry_the_comparison(swept):
    runs = {run.info.run_name: run for run in child_runs(swept.uri)}
    assert set(runs) == {"baseline b2 p8 L6", "kv_cache b2 p8 L6"}
    kv, base = runs["kv_cache b2 p8 L6"].data, runs["baseline b2 p8 L6"].data
    assert kv.metrics["speedup"] == pytest.approx(base.metrics["runtime_mean_s"] / kv.metrics["runtime_mean_s"])
    assert kv.tags["tokens_verdict"] == "ok" and kv.tags["compared"] == "run"
    assert kv.tags["baseline_run_id"] == runs["baseline b2 p8 L6"].info.run_id
    note = MlflowClient(tracking_uri=swept.uri).get_run(kv.tags["mlflow.parentRunId"]).data.tags["mlflow.note.content"]
    assert "| kv_cache | 1 | 0 |" in note


def groups_in_order(dom: str) -> list[str]:
    """The group rows of the runs table, top to bottom: ag-grid draws rows in any order, `row-index` says
    where each goes; a group row's name cell reads `Group: <value>`."""
    found = {}
    for chunk in dom.split('row-index="')[1:]:
        group = re.search(r">Group: (?:<!-- -->)?([^<]+)<", chunk)
        if group:
            found[int(chunk[: chunk.index('"')])] = html.unescape(group[1])
    return [found[i] for i in sorted(found)]


def first_line(stream, timeout_s: float) -> str:
    """The first line a process prints, or "" if none comes in time."""
    got = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return got[0].strip() if got else ""


HEADERS = r"""JSON.stringify({
  view: (v => v && [v.left, v.right])(document.querySelector('.ag-header-viewport')?.getBoundingClientRect()),
  cells: [...document.querySelectorAll('.ag-header-cell[col-id]')].map(c =>
    [c.getAttribute('col-id'), c.getBoundingClientRect().left, c.getBoundingClientRect().right]),
})"""
"""Where the runs table's scrolling part shows on the screen, and each header cell's left and right edges."""


def header_cells(url: str, profile: Path, timeout_s: float = 120) -> dict:
    """The runs table's header cells as a first visit in a 1600x1000 window lays them out (headless chromium, read
    through its DevTools protocol): {"view": [left, right], "cells": [[col-id, left, right], ...]}."""
    import asyncio

    import aiohttp  # Ray's own dependency: a WebSocket client without another package

    port = free_port()
    browser = subprocess.Popen(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update", f"--user-data-dir={profile}",
         "--window-size=1600,1000", f"--remote-debugging-port={port}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip

    async def read() -> dict:
        deadline = time.monotonic() + timeout_s
        while not responds(f"http://127.0.0.1:{port}/json/version"):
            assert time.monotonic() < deadline, "chromium's DevTools never answered"
            await asyncio.sleep(0.2)
        opened = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?{quote(url, safe='')}", method="PUT")
        target = json.load(urllib.request.urlopen(opened, timeout=10))
        async with aiohttp.ClientSession() as session, session.ws_connect(target["webSocketDebuggerUrl"]) as ws:
            settled, found = 0, {}
            for call in range(int(timeout_s * 2)):
                await ws.send_json({"id": call, "method": "Runtime.evaluate", "params": {"expression": HEADERS}})
                while (reply := await ws.receive_json()).get("id") != call:
                    pass
                found = json.loads(reply["result"]["result"]["value"])
                laid_out = any(cell[0] == "tags.`measurement`" for cell in found["cells"])
                settled = settled + 1 if laid_out else 0
                if settled == 4:  # two seconds unchanged after the table drew its columns
                    return found
                await asyncio.sleep(0.5)
            return found

    try:
        return asyncio.run(read())
    finally:
        browser.terminate()
        browser.wait(timeout=30)


def responds(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
        return True
    except (urllib.error.URLError, OSError):
        return False


def answers(url: str) -> bool:
    return responds(f"{url}/health")


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs /usr/bin/chromium (Debian package chromium; .ci/run installs it)"
)
def test_the_printed_url_opens_the_sweeps_runs_in_a_browser(swept):
    printed = re.search(r"comparison: (\S+)$", [line for line in lines(swept.err) if line.startswith("ui:")][-1])[1]
    port = free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "tracking.ui", "--uri", swept.uri, "--sweep", "t", "--port", str(port)],
        cwd=swept.tmp,
        env=driver_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        url = first_line(ui.stdout, 300)
        assert url == printed.replace(":5000/", f":{port}/"), ui.stderr.read() if ui.poll() is not None else url
        browser = subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={swept.tmp / 'chromium'}",
                "--virtual-time-budget=15000",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
        dom = browser.stdout
        assert 'data-testid="sort-header-ui/speedup"' in dom, dom[-2000:]  # the comparison's column, sorted on
        assert "baseline b2 p8 L6" in dom and "kv_cache b2 p8 L6" in dom  # the sweep's runs, by name
        runs = MlflowClient(tracking_uri=swept.uri).search_runs(
            [child_runs(swept.uri)[0].info.experiment_id],
            f"tags.`in_report.{child_runs(swept.uri)[0].data.tags['mlflow.parentRunId']}` = 't'",
            order_by=["metrics.`ui/speedup` DESC"],
        )
        best_first = [run.data.params["variant"] for run in runs]
        assert groups_in_order(dom) == best_first  # grouped by variant, the best speedup's group first
        for run in runs:  # the figures as the view shows them: four significant digits
            assert f">{run.data.metrics['ui/speedup']:.4g}<" in dom
        assert ">Model registry<" in dom  # the Model-training sidebar
        assert ">Overview<" not in dom and ">Training runs<" not in dom  # not the GenAI pages
        assert "viewing a shared view" in dom
        # the verdicts first: after the run's name and age, the speedup, its interval, the tokens verdict and the
        # measurement, every one inside the table's visible part at 1600x1000 on a first visit (the assistant
        # panel MLflow opens then takes the window's right side)
        laid_out = header_cells(url, swept.tmp / "chromium-1600")
        left, right = laid_out["view"]
        scrolled = sorted((c for c in laid_out["cells"] if c[1] >= left - 1), key=lambda c: c[1])
        first = [name for name, *_ in scrolled[:5]]
        assert first == [
            "metrics.`ui/speedup`",
            "metrics.`ui/speedup_low`",
            "metrics.`ui/speedup_high`",
            "tags.`tokens_verdict`",
            "tags.`measurement`",
        ], laid_out
        assert all(left - 1 <= a and b <= right + 1 for _, a, b in scrolled[:5]), laid_out  # no scrolling needed
    finally:
        if ui.poll() is None:
            ui.send_signal(signal.SIGINT)  # Ctrl-C: tracking.ui stops its server and exits
        status = ui.wait(timeout=60)
    assert status == 0
    assert not answers(f"http://127.0.0.1:{port}")  # the server went with it
    assert os.path.isfile(swept.tmp / ".sweeps" / "logs" / f"mlflow-ui-{port}.log")
