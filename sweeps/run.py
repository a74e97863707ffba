"""`python -m sweeps.run +grid=NAME [overrides]`: expand the grid, run it on Ray, record it in MLflow.

The thin Hydra entry point over `sweeps.driver.run_sweep(config)`, the function tests call with
a config from `hydra.compose`; the exit statuses are the driver's (0, 1 failed trials, 2 bad input,
3 results not recorded, 128 + the signal after an interrupt); under `-m` every job runs, and a last line
names those that did not end with 0 (the exit status is the worst of theirs).
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


OUTCOMES: list[tuple[str, int]] = []  # under -m (Hydra's multirun): each job's overrides and exit status


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(config: DictConfig) -> None:
    status = run_sweep(config)
    if not multirun():
        if status:
            sys.exit(status)
        return
    from hydra.core.hydra_config import HydraConfig

    OUTCOMES.append((" ".join(HydraConfig.get().overrides.task), status))  # the next job runs: exiting would stop them


def multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def multirun_status() -> int:
    """After every job of a multirun: one line naming those that did not end with 0, and the worst status."""
    failed = [(overrides, status) for overrides, status in OUTCOMES if status]
    if failed:
        named = "; ".join(f"[{overrides}] exit {status}" for overrides, status in failed)
        print(f"multirun: {len(failed)} of {len(OUTCOMES)} job(s) did not finish: {named}", file=sys.stderr)
    return max((status for _, status in failed), default=0)


if __name__ == "__main__":
    refuse_bad_command_line()  # Hydra's own errors and a URI's password: one line, exit 2, before Hydra writes a file
    main()
    sys.exit(multirun_status())
