"""`python -m sweeps.run +grid=NAME [overrides]`: expand the grid, run it on Ray, record it in MLflow.

The thin Hydra entry point over `sweeps.driver.run_sweep(config)`, the plain function tests call with
a config from `hydra.compose`; the exit statuses are the driver's (0, 1 failed trials, 2 bad input,
3 results not recorded, 128 + the signal after an interrupt).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from sweeps.driver import BAD_INPUT, FAILED_TRIALS, UNRECORDED, run_sweep
from sweeps.planning.config import register
from sweeps.planning.entry_errors import refuse_bad_command_line

__all__ = ["run_sweep", "main", "FAILED_TRIALS", "BAD_INPUT", "UNRECORDED"]

register()


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(config: DictConfig) -> None:
    status = run_sweep(config)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    refuse_bad_command_line()  # Hydra's own errors and a URI's password: one line, exit 2, before Hydra writes a file
    main()
