"""Does the link a sweep prints open on its grouped runs table within 15 s, at the full grid's size?

Builds the store benchmarks/report_speed.py builds (5,520 child runs by default: the full grid on two GPU
types, through the sweep driver's own Recorder) and its report, which saves the sweep's view (grouped by
variant at the headline point: tracking/store/view.py), unless the store holds them already (`--keep DIR`
used before, or `--uri`). Then it starts the light `mlflow server` tracking.ui starts, on 127.0.0.1, opens
the printed URL in headless Chromium (driven over its DevTools pipe, no extra package) and times from
navigation to a table whose group rows are the variants at the headline point, best speedup first.
The last line is JSON, with `render_s`; exit 1 if the table is not there within `--budget-s`.

    python benchmarks/ui_at_size.py [--runs 5520] [--keep DIR] [--uri URI] [--budget-s 15] [--screenshot PNG]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # this checkout's packages, wherever it is installed from

from report_speed import SWEEP, build_store, has_sweep  # noqa: E402

from tracking.store.connect import open_client  # noqa: E402
from tracking.store.view import VIEW_PREFIX, has_view, read_view, view_key  # noqa: E402
from tracking.ui import LIGHT_ENV, _free_port, server_argv, view_url, wait_until_up  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
SHOWN = """(() => {
  const rows = [...document.querySelectorAll('.ag-pinned-left-cols-container [row-index]')];
  const group = r => { const s = [...r.querySelectorAll('span[title]')].find(s => s.textContent.startsWith('Group: '));
                       return s ? s.title : null; };
  const groups = rows.map(r => [Number(r.getAttribute('row-index')), group(r)]).filter(g => g[1] !== null)
                     .sort((a, b) => a[0] - b[0]).map(g => g[1]);
  return JSON.stringify({groups, rows: rows.length,
                         sorted: !!document.querySelector('[data-testid="sort-header-ui/speedup"]')});
})()"""
"""The group rows of the runs table, top to bottom (ag-grid renders rows out of order: row-index says
where), how many rows it drew, and whether the sort header of the view's speedup column is there."""


class Browser:
    """Headless Chromium on its DevTools pipe (fds 3 and 4, NUL-terminated JSON): one page, flat sessions."""

    def __init__(self, profile: Path, width: int = 1600, height: int = 1000):
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def fds() -> None:
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
        argv += ["--disable-background-networking", "--disable-component-update", "--remote-debugging-pipe"]
        argv += [f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"]
        self.proc = subprocess.Popen(
            argv, preexec_fn=fds, pass_fds=(3, 4), stderr=subprocess.DEVNULL, start_new_session=True
        )
        os.close(to_browser)
        os.close(from_browser)
        self._ids, self._buffer = 0, b""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._ids += 1
        message = {"id": self._ids, "method": method, "params": params or {}}
        os.write(self._write, json.dumps(message | ({"sessionId": session} if session else {})).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._read, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed its pipe (exit {self.proc.poll()})")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(line)
            if reply.get("id") == self._ids:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def page(self, method: str, params: dict | None = None) -> dict:
        return self.call(method, params, self.session)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        os.close(self._write)
        os.close(self._read)


def render(
    url: str, expected: list[str], budget_s: float, profile: Path, screenshot: Path | None = None
) -> tuple[float | None, dict]:
    """Seconds from navigation until the grouped table shows the expected first groups in order (None if
    not within the budget), and what the page showed last; `screenshot`: a PNG of the page then."""
    browser = Browser(profile)
    try:
        started = time.perf_counter()
        browser.page("Page.navigate", {"url": url})
        shown: dict = {}
        while time.perf_counter() - started < budget_s:
            value = browser.page("Runtime.evaluate", {"expression": SHOWN, "returnByValue": True})["result"]
            shown = json.loads(value.get("value") or "{}")
            groups = shown.get("groups", [])
            if groups and groups == expected[: len(groups)] and len(groups) >= min(3, len(expected)):
                elapsed = time.perf_counter() - started
                if screenshot:
                    time.sleep(1)  # the table's last layout pass
                    png = browser.page("Page.captureScreenshot", {"format": "png"})["data"]
                    screenshot.write_bytes(base64.b64decode(png))
                return elapsed, shown
            time.sleep(0.1)
        return None, shown
    finally:
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5520)
    parser.add_argument("--keep", help="build the store (SQLite file, artifacts, reports) in this directory, keep it")
    parser.add_argument("--uri", help="the store to build and read (default: a SQLite file in the directory)")
    parser.add_argument("--budget-s", type=float, default=15.0, help="the table must show within it (default 15)")
    parser.add_argument("--screenshot", type=Path, help="write a PNG of the table as it first shows")
    args = parser.parse_args()
    from tracking.report.build import attach, build_report

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp).resolve()
        root.mkdir(parents=True, exist_ok=True)
        uri = args.uri or f"sqlite:///{root}/mlflow.db"
        store_s = report_s = 0.0
        if not has_sweep(uri):
            started = time.perf_counter()
            build_store(uri, args.runs, root)
            store_s = time.perf_counter() - started
            print(f"store: {args.runs} child runs written in {store_s:.1f} s ({uri})", file=sys.stderr)
        client = open_client(uri, "read")
        experiment_id = client.get_experiment_by_name("tokengen").experiment_id
        parent = client.search_runs([experiment_id], f"tags.sweep_parent = '{SWEEP}'")[0].info.run_id
        key = view_key(parent)
        if not has_view(client, experiment_id, key):
            started = time.perf_counter()
            report = build_report(uri, "tokengen", SWEEP, root / "reports")
            attach(uri, report)
            report_s = time.perf_counter() - started
            print(f"report: built, attached and published in {report_s:.1f} s", file=sys.stderr)
        tag = client.get_experiment(experiment_id).tags[VIEW_PREFIX + key]
        state, name = read_view(tag), json.loads(tag)["name"]
        runs = client.search_runs(
            [experiment_id], state["searchFilter"], order_by=[f"{state['orderByKey']} DESC"], max_results=1000
        )
        expected = list(dict.fromkeys(r.data.params.get("variant") for r in runs))
        children = f"tags.`mlflow.parentRunId` = '{parent}'"
        total = len(client.search_runs([experiment_id], children, max_results=50000))  # MLflow's largest page
        print(f"view: {name!r}, {len(runs)} runs in {len(expected)} variant groups", file=sys.stderr)

        port = _free_port("127.0.0.1")
        log = root / f"mlflow-server-{port}.log"
        with open(log, "ab") as out:
            server = subprocess.Popen(
                [sys.executable, "-m", *server_argv(uri, port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **LIGHT_ENV},
                start_new_session=True,
            )
        try:
            started = time.perf_counter()
            if not wait_until_up(f"http://127.0.0.1:{port}", server, 300):
                print(f"error: the MLflow server did not come up (its log: {log})", file=sys.stderr)
                return 1
            server_s = time.perf_counter() - started
            url = view_url(f"http://127.0.0.1:{port}", experiment_id, key)
            print(f"ui: {url}", file=sys.stderr)
            render(url, expected, 120, root / "chromium-warm")  # the server's first page load pays its imports
            render_s, shown = render(url, expected, args.budget_s, root / "chromium", args.screenshot)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    ok = render_s is not None
    print(
        f"grouped table {'shown' if ok else 'NOT shown'}"
        + (f" in {render_s:.2f} s" if ok else f" within {args.budget_s:.0f} s")
        + f": groups {shown.get('groups', [])[:5]}..., {shown.get('rows')} rows drawn, sorted: {shown.get('sorted')}",
        file=sys.stderr,
    )
    figures = {"runs": total, "view_runs": len(runs), "groups": len(expected), "store_s": round(store_s, 1)}
    figures |= {"report_s": round(report_s, 1), "server_s": round(server_s, 1)}
    print(json.dumps(figures | {"render_s": round(render_s, 2) if ok else None, "budget_s": args.budget_s}))
    return 0 if ok and total else 1


if __name__ == "__main__":
    sys.exit(main())
