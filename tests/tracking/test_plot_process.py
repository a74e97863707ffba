"""The report's plots drawn beside its tables (tracking/report/plot_process.py): in a forked child where the platform
forks, in the report's own process where the child gives no answer, a plot's own error surfacing there."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from tracking.report.plot_process import PlotDrawing

FRAME = pd.DataFrame({"x": [1, 2, 3]})


def writes_its_pid(frame, directory):
    path = directory / "pid.png"
    path.write_text(f"{os.getpid()} {len(frame)}")
    return path


def draws_nothing(frame, directory):
    return None


def test_the_plots_are_drawn_in_a_child_and_named_in_order(tmp_path):
    drawing = PlotDrawing({"nothing": draws_nothing, "pid": writes_its_pid}, FRAME, tmp_path).start()
    plots = drawing.plots()
    assert list(plots) == ["pid"] and plots["pid"] == tmp_path / "pid.png"
    pid, rows = plots["pid"].read_text().split()
    assert rows == "3" and int(pid) != os.getpid()  # drawn beside the parent, from its frame


def test_a_child_without_an_answer_leaves_the_drawing_to_the_parent_where_an_error_shows(tmp_path):
    def fails_in_child(frame, directory):
        if os.getpid() != parent:
            os._exit(3)  # killed mid-plot: no answer comes back
        return writes_its_pid(frame, directory)

    parent = os.getpid()
    plots = PlotDrawing({"pid": fails_in_child}, FRAME, tmp_path).start().plots()
    assert int(plots["pid"].read_text().split()[0]) == parent

    def raises(frame, directory):
        raise ValueError("a plot's own error")

    with pytest.raises(ValueError, match="a plot's own error"):
        PlotDrawing({"bad": raises}, FRAME, tmp_path).start().plots()
