"""The report's plots, drawn beside its tables.

Matplotlib's layout and rasterizing are the largest CPU cost of a big report (about a third of a 5,520-trial one on
2 cores: benchmarks/report_speed.py), and nothing else the report does needs the images, only their file names. Where
the platform forks, a child process draws them from the parent's frame (shared on fork, never copied) while the parent
renders the tables, writes the CSVs and publishes to MLflow; the child writes only the PNG files and sends back their
titles and paths. Where it cannot fork, or the child ends without its answer (killed, a plot that raised), the plots are
drawn in the report's own process when they are asked for, so a plot's own error surfaces there as it would unforked.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Callable

import pandas as pd

Draw = Callable[[pd.DataFrame, Path], "Path | None"]


def draw_all(draws: dict[str, Draw], frame: pd.DataFrame, directory: Path) -> dict[str, Path]:
    """title -> the PNG written, for each plot the frame has something to draw for."""
    return {title: path for title, draw in draws.items() if (path := draw(frame, directory))}


class PlotDrawing:
    """The plots of one report: `start()` forks their drawing, `plots()` waits for it (or draws them itself)."""

    def __init__(self, draws: dict[str, Draw], frame: pd.DataFrame, directory: Path):
        self.draws, self.frame, self.directory = draws, frame, directory
        self._process = None
        self._answer = None

    def start(self) -> PlotDrawing:
        if "fork" not in multiprocessing.get_all_start_methods():
            return self
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        try:
            self._process = context.Process(target=self._child, args=(send,), name="report-plots", daemon=True)
            self._process.start()
        except OSError:  # no process to spare: drawn in-process when asked
            self._process = None
        send.close()
        self._answer = receive
        return self

    def _child(self, send) -> None:
        try:
            drawn = draw_all(self.draws, self.frame, self.directory)
            send.send({title: str(path) for title, path in drawn.items()})
        except BaseException:  # noqa: BLE001 - the parent draws again, in-process, where the error shows itself
            os._exit(1)
        send.close()

    def plots(self) -> dict[str, Path]:
        """title -> PNG, in the order of `draws`: the child's, or drawn here where it gave none."""
        if self._process is not None:
            answer = None
            try:
                answer = self._answer.recv()
            except EOFError:
                pass
            self._process.join()
            self._answer.close()
            self._process = None
            if answer is not None:
                return {title: Path(path) for title, path in answer.items()}
        return draw_all(self.draws, self.frame, self.directory)
