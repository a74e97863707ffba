"""Can a trial's fork start CUDA? Asked once before a sweep on a new machine (scripts/gpu_probe.py).

Every trial is a fork of the worker's warm parent (sweeps/execution/trial_process.py). A parent that started
CUDA while importing leaves every fork failing "Cannot re-initialize CUDA in forked subprocess", which on the
H200's image cost a whole sweep call to learn (torchao asks the GPU's capability at import). Here the warm parent
is started as a sweep starts it, torch.compile's imports included, and one fork of it starts CUDA: a poisoned
parent is one line in seconds, before any trial.
"""

from __future__ import annotations

import time

from sweeps.execution.trial_process import warm_context
from tokengen.contract.record import first_line

POISONED = "re-initialize CUDA"  # torch's words where a fork inherits a parent's started CUDA
POISONED_HINT = "; an import in the parent started CUDA (tokengen/measure/model_imports.py keeps the models off it)"
ANSWER_S = 300.0  # the warm parent's imports and one fork, on the slowest machine seen (a 2-core CPU: ~20 s)


def start_cuda(expect_cuda: bool) -> str:
    """In the fork: start CUDA the way a trial does (a tensor on the device), or say why there is none."""
    import torch

    if not torch.cuda.is_available():
        if expect_cuda:
            raise RuntimeError("torch in the fork sees no CUDA device, though this machine's torch does")
        return "no CUDA device to start (a CPU build or no GPU)"
    major, minor = torch.cuda.get_device_capability()
    torch.ones(1, device="cuda").sum().item()
    return f"started CUDA on {torch.cuda.get_device_name()} (capability {major}.{minor})"


def _answer(expect_cuda: bool, conn) -> None:
    try:
        conn.send((True, start_cuda(expect_cuda)))
    except BaseException as exc:  # noqa: BLE001 - whatever stops the fork is the answer
        conn.send((False, f"{type(exc).__name__}: {first_line(exc)}"))
    conn.close()


def fork_check(expect_cuda: bool) -> tuple[bool, str]:
    """(ok, line): one fork of the sweep's warm parent, started as a sweep's worker starts it, runs start_cuda."""
    context = warm_context(compiler=True)
    receiver, sender = context.Pipe(duplex=False)
    started = time.perf_counter()
    process = context.Process(target=_answer, args=(expect_cuda, sender))
    process.start()
    sender.close()
    ok, said = False, f"no answer in {ANSWER_S:.0f} s"
    if receiver.poll(ANSWER_S):
        try:
            ok, said = receiver.recv()
        except EOFError:  # the fork died before it could answer (a signal, a crash in CUDA's start)
            process.join(5)
            said = f"the fork ended with exit code {process.exitcode} and no answer"
    process.join(5)
    if process.is_alive():
        process.kill()
    seconds = time.perf_counter() - started
    if ok:
        return (
            True,
            f"fork: a fork of the trials' warm parent answered: {said} ({seconds:.1f} s with the parent's imports)",
        )
    hint = POISONED_HINT if POISONED in said else ""
    return (
        False,
        f"fork: a fork of the trials' warm parent failed ({said}) after {seconds:.1f} s: no trial can run{hint}",
    )
