"""torch.compile's start-up, done in the warm parent the trials fork from: it must leave a fork nothing it
cannot inherit (a thread, a process, CUDA), and the forks must have it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sweeps.execution.trial_process import COMPILER_PRELOAD, PRELOAD

pytestmark = pytest.mark.slow  # processes that import torch, the compiler and the models (about 30 s in all)

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


def test_the_compiler_is_imported_without_a_thread_a_process_or_cuda(probes):
    seen = json.loads(probes("compiler")[-1])
    assert "torch._inductor.compile_fx" in seen["preloaded"] and "torch._dynamo" in seen["preloaded"]
    assert seen["cuda"] == [], f"importing the compiler asked CUDA {seen['cuda']}: a fork could not start it"
    assert seen["new_tasks"] == 0 and seen["threads"] == 1, "a thread started in the parent is missing in a fork"
    assert seen["children"] == 0, "a process started by the parent is not the fork's"
    assert seen["hashed"], "torch's sources were not hashed in the parent: every fork hashes them again"


FORK = """
import sys
from sweeps.execution.trial_process import warm_context
compiler = sys.argv[1] == "compiler"
context = warm_context(compiler)  # this process's forkserver, started here for the first time
reader, writer = context.Pipe(duplex=False)
code = "import sys; pipe.send('torch._inductor.compile_fx' in sys.modules)"
process = context.Process(target=exec, args=(code, {"pipe": writer}))
process.start()
print(reader.recv())
process.join(120)
"""


def test_a_trial_fork_has_the_compiler_imported_where_the_workers_first_trial_compiles(probes):
    """A trial process forked from a fresh worker's parent whose first trial compiles (a process of its own:
    pytest's forkserver started long ago)."""
    forked_with_compiler = probes("fork")[-1] == "True"
    assert forked_with_compiler, "the forkserver did not preload tokengen.measure.compiler_imports"
    assert COMPILER_PRELOAD not in PRELOAD, "an eager sweep's workers would import the compiler too"


CUDA_BUILD = """
import json, sys
import torch

if sys.argv[1] == "cuda":
    torch.version.cuda = "13.0"  # what the warm parent reads to tell a CUDA build; nothing else is changed
asked = []

def trap(name):
    real = getattr(torch.cuda, name)
    def called(*args, **kwargs):
        if name != "is_available" or not torch.cuda._nvml_based_avail():  # through NVML, it starts nothing
            asked.append(name)
        return real(*args, **kwargs)
    setattr(torch.cuda, name, called)

for name in ("is_available", "init", "get_device_capability", "get_device_properties", "get_device_name",
             "current_device", "mem_get_info"):
    trap(name)
from sweeps.execution.trial_process import PRELOAD
for name in PRELOAD:
    __import__(name)
from transformers.utils.import_utils import is_torchao_available
print(json.dumps({"asked": asked, "torchao": "torchao" in sys.modules, "torchao_for_forks": is_torchao_available(),
                  "models": "transformers.models.gpt2.modeling_gpt2" in sys.modules,
                  "lazy_init_restored": torch.cuda._lazy_init.__module__ == "torch.cuda"}))
torch.version.cuda = None  # now a fork of that parent: a trial that quantizes imports torchao itself
from tokengen.knobs.quant import int8
from tokengen.models import build_model
print(json.dumps({"quantized_logits": list(int8(build_model("tiny", "float32", "cpu", 0))(torch.tensor([[1, 2]])).logits.shape)}))
"""


def warm_parent_imports(probes, build: str) -> dict:
    """What importing the forkserver's PRELOAD does on a `cpu` build or (as its version tells it) a `cuda` one."""
    parent, fork = probes(build)[-2:]
    return {**json.loads(parent), **json.loads(fork)}


def test_the_warm_parent_imports_the_models_and_asks_nothing_of_cuda_on_a_cuda_build(probes):
    """A parent that asked the GPU anything has started CUDA, and no fork of it can (on the H200 every trial failed
    "Cannot re-initialize CUDA in forked subprocess": torchao, imported with transformers' models, asks at import).
    The CPU build's parent imports torchao with the models, and what it asks: this probe sees it."""
    cpu = warm_parent_imports(probes, "cpu")
    assert cpu["models"] and cpu["torchao"] and cpu["asked"], f"the probe sees nothing to catch: {cpu}"
    cuda = warm_parent_imports(probes, "cuda")
    assert cuda["asked"] == [], f"the warm parent asked CUDA {cuda['asked']}: every trial's fork would fail"
    assert not cuda["torchao"], "torchao is imported in the warm parent: it asks the GPU's capability at import"
    assert cuda["models"], "the models are left to every trial's own start-up"
    assert cuda["torchao_for_forks"] and cuda["lazy_init_restored"], "the forks inherit a hidden torchao or CUDA"
    assert len(cuda["quantized_logits"]) == 3, "a fork of that parent could not quantize with torchao"


STARTS_CUDA = """
import json, sys
import torch

torch.version.cuda = "13.0"
sys.path.insert(0, sys.argv[1])
from tokengen.measure.model_imports import preload
done = preload(["json", "starts_cuda", "csv"])
print(json.dumps({"done": done, "half_imported": "starts_cuda" in sys.modules}))
"""


def test_an_import_that_would_start_cuda_is_left_to_the_trials(probes):
    seen = json.loads(probes("starts_cuda")[-1])
    assert seen == {"done": ["json"], "half_imported": False}, seen


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """Every probe of this file started at once, each a process of its own that imports torch and the compiler
    (about 10 s on one core): side by side they take about half the time they take one after another. Gives
    a function from a probe's name to its output lines, failing the test that asks for one that failed."""
    module = tmp_path_factory.mktemp("modules")
    (module / "starts_cuda.py").write_text("import torch\ntorch.cuda.get_device_capability()\n")
    argv = {
        "compiler": [PROBE],
        "fork": [FORK, "compiler"],
        "cpu": [CUDA_BUILD, "cpu"],
        "cuda": [CUDA_BUILD, "cuda"],
        "starts_cuda": [STARTS_CUDA, str(module)],
    }
    started = {
        name: subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, args in argv.items()
    }
    done = {}
    try:
        for name, process in started.items():
            out, err = process.communicate(timeout=300)
            done[name] = (process.returncode, out, err)
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    def output(name: str) -> list[str]:
        returncode, out, err = done[name]
        assert returncode == 0, err[-3000:]
        return out.strip().splitlines()

    return output
