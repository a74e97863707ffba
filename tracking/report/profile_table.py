"""Each trial profiled by Nsight Systems: its report file linked where the store keeps it, its CSV summaries, the
kernel figures, and why a profile is not what was asked (a stream kept for a later conversion, nsys ended)."""

from __future__ import annotations

import pandas as pd

from tracking.report.comparison import POINT, finished, pick, varying

FIGURES = ["gpu_kernel_us_per_step", "gpu_busy_pct", "top_kernel", "top_kernel_pct"]
NSYS_NOTE = (
    "Each trial under nsys: its report (open it in Nsight Systems) and CSV summaries among its run's artifacts; on "
    "CUDA, GPU kernel time per decode step, the busy share and the top kernel by time (docs/results.md, Nsight Systems)."
)


def report_link(row) -> str | None:
    """A Markdown link to the trial's report among its run's artifacts."""
    name, root = row.get("profile_report"), row.get("artifact_uri")
    if not isinstance(name, str) or not name:
        return None
    return f"[{name}]({root.rstrip('/')}/{name})" if isinstance(root, str) and root else name


def nsys_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """One row per finished trial that ran under nsys (a report, or a note saying why none)."""
    if "profile" not in frame:
        return None
    rows = finished(frame)
    rows = rows[rows["profile"] == "nsys"]
    if rows.empty:
        return None
    rows = rows.assign(profile_report=[report_link(row) for _, row in rows.iterrows()])
    columns = varying(frame) + ["variant"] + POINT + ["profile_report", "profile_summaries", *FIGURES, "profile_note"]
    return pick(rows, columns)
