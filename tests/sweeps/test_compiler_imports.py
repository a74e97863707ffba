"""torch.compile's start-up, done in the warm parent the trials fork from: it must leave a fork nothing it
cannot inherit (a thread, a process, CUDA), and the forks must have it."""

from __future__ import annotations

import json
import subprocess
import sys

from sweeps.execution.trial_process import COMPILER_PRELOAD, PRELOAD

PROBE = """
import json, os, threading
import torch

touched = []

def trap(owner, name):
    real = getattr(owner, name, None)
    if real is None:  # a CPU build has no _cuda_getDeviceCount: adding one would make torch think it has CUDA
        return
    def called(*args, **kwargs):
        touched.append(name)
        return real(*args, **kwargs)
    setattr(owner, name, called)

for owner, name in [(torch.cuda, "is_available"), (torch.cuda, "device_count"), (torch.cuda, "init"),
                    (torch.cuda, "_lazy_init"), (torch._C, "_cuda_getDeviceCount")]:
    trap(owner, name)

def children():
    mine = str(os.getpid())
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        found += stat.rsplit(")", 1)[1].split()[1] == mine
    return found

tasks = len(os.listdir("/proc/self/task"))
from tokengen.measure import compiler_imports
from torch._inductor import codecache
hashed = []
codecache.build_code_hash = lambda *args: hashed.append(args)  # what torch_key() calls when it is not cached
codecache.torch_key()
print(json.dumps({
    "preloaded": compiler_imports.PRELOADED,
    "cuda": touched,
    "new_tasks": len(os.listdir("/proc/self/task")) - tasks,
    "threads": threading.active_count(),
    "children": children(),
    "hashed": not hashed,
}))
"""


def test_the_compiler_is_imported_without_a_thread_a_process_or_cuda():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "torch._inductor.compile_fx" in seen["preloaded"] and "torch._dynamo" in seen["preloaded"]
    assert seen["cuda"] == [], f"importing the compiler asked CUDA {seen['cuda']}: a fork could not start it"
    assert seen["new_tasks"] == 0 and seen["threads"] == 1, "a thread started in the parent is missing in a fork"
    assert seen["children"] == 0, "a process started by the parent is not the fork's"
    assert seen["hashed"], "torch's sources were not hashed in the parent: every fork hashes them again"


FORK = """
import sys
from sweeps.execution.trial_process import _warm_context
compiler = sys.argv[1] == "compiler"
context = _warm_context(compiler)  # this process's forkserver, started here for the first time
reader, writer = context.Pipe(duplex=False)
code = "import sys; pipe.send('torch._inductor.compile_fx' in sys.modules)"
process = context.Process(target=exec, args=(code, {"pipe": writer}))
process.start()
print(reader.recv())
process.join(120)
"""


def forked_with_compiler(first_trial: str) -> bool:
    """Whether a trial process forked from a fresh worker's parent has the compiler imported, the worker's
    first trial being `compiler` or `eager` (a process of its own: pytest's forkserver started long ago)."""
    done = subprocess.run([sys.executable, "-c", FORK, first_trial], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1] == "True"


def test_a_trial_fork_has_the_compiler_imported_where_the_workers_first_trial_compiles():
    assert forked_with_compiler("compiler"), "the forkserver did not preload tokengen.measure.compiler_imports"
    assert COMPILER_PRELOAD not in PRELOAD, "an eager sweep's workers would import the compiler too"


CUDA_CHECKS = """
import importlib, json, sys
import torch

poisoning = []
real = torch.cuda.is_available

def is_available():  # on a CUDA build, unless torch asks NVML instead, this calls cudaGetDeviceCount: a poisoned fork
    if not torch.cuda._nvml_based_avail():
        poisoning.append("is_available")
    return real()

torch.cuda.is_available = is_available
if sys.argv[1] == "warm_parent":
    from sweeps.execution.trial_process import _warm_context
    _warm_context()  # the environment the forkserver starts with; its process starts at the first trial
from sweeps.execution.trial_process import PRELOAD
for name in PRELOAD:
    importlib.import_module(name)
print(json.dumps(poisoning))
"""


def runtime_counts(environment: str) -> list[str]:
    """The availability checks the warm parent's imports make that would start CUDA's runtime on a CUDA build,
    imported in the `warm_parent`'s environment or a `plain` one."""
    done = subprocess.run([sys.executable, "-c", CUDA_CHECKS, environment], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_warm_parents_imports_leave_cuda_to_the_fork_on_a_cuda_build():
    """On the H200 every trial failed with "Cannot re-initialize CUDA in forked subprocess": torchao, imported with
    transformers' models, asks torch.cuda.is_available() at import. The plain run shows the probe sees that."""
    assert runtime_counts("plain"), "the imports no longer ask is_available(): this probe checks nothing"
    assert runtime_counts("warm_parent") == [], "the forkserver's imports start CUDA: every trial's fork fails"
