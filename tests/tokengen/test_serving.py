"""Request workloads (tokengen/engines/request_server.py): every request gets exactly its solo greedy generate()
tokens, whichever slot serves it and whenever it is admitted; static and continuous batching and
transformers' continuous batching return the same array; the slots run exactly the forwards their
admission rule implies, learned through the stop check.

Workloads that can tell: each request has its own prompt (P = 5), lengths differ (some end at their
first token), there are more requests than slots and not a multiple of them, so slots are refilled
at different steps and the last batch is partial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import re

import pytest
import torch
from servers import seeded_uri

from tokengen.contract.declarations import LAGGED, in_family, load
from tokengen.contract.rules import resolve, serving_problem
from tokengen.contract.spec import TrialSpec
from tokengen.decode.prompts import prompt_ids
from tokengen.decode.stopping import target_lengths
from tokengen.engines import make_generator
from tokengen.engines.request_server import request_lengths, serving_figures
from tokengen.models import build_model, eos_ids

MODELS = ["tiny", "llama-tiny"]
N, SLOTS, P, S = 7, 3, 5, 12  # requests, slots, prompt_len, max_seqlen
STOP = "uniform:1-12"
MODES = {"static": {"batching": "static"}, "continuous": {"batching": "continuous"}}

logging.getLogger("ContinuousBatchingLogger").setLevel(logging.CRITICAL)  # no psutil on CPU: it says so loudly
_models: dict = {}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: these tests check tokens and counts, not speed, and on a 2-core machine that
    others share, two threads that wait for each other at every tiny op cost ~8 ms each (20x)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def model_for(name: str):
    if name not in _models:
        _models[name] = build_model(name, "float32", "cpu", seed=0)
    return _models[name]


def spec_for(model: str, variant: str | None = "static_cache", **fields) -> TrialSpec:
    fields = {"batch_size": SLOTS, "requests": N, "prompt_len": P, "max_seqlen": S, "stop": STOP, **fields}
    return resolve(variant, model=model, **fields)


def serve(model: str, variant: str | None = "static_cache", net=None, **fields):
    return make_generator(net or model_for(model), spec_for(model, variant, **fields))()


def solo(net, prompt: torch.Tensor, length: int) -> torch.Tensor:
    """One request alone through greedy generate(): its first `length` generated tokens (P + length,)."""
    out = net.generate(
        prompt[None],
        attention_mask=torch.ones_like(prompt[None]),
        do_sample=False,
        max_new_tokens=length,
        eos_token_id=[],
        pad_token_id=0,
    )
    return out[0]


def simulated_forwards(lengths: list[int], slots: int, continuous: bool) -> int:
    """The steps the admission rule implies, with a sync check: every step makes a token in every
    slot that holds a live request (an admission step the admitted requests' first); the host sees a
    slot's end at the step that made it, and admits into free slots (continuous) or only into all of
    them (static)."""
    queue, held, forwards, free = list(lengths), {}, 0, list(range(slots))  # held: slot -> tokens still to make
    while True:
        for s in free:
            held.pop(s, None)
        if continuous or len(free) == slots:
            held.update({s: queue.pop(0) for s in free[: len(queue)]})
        if not held:
            return forwards
        while True:
            forwards += 1
            held = {s: max(0, r - 1) for s, r in held.items()}
            if any(r == 0 for r in held.values()):
                break
        free = [s for s in range(slots) if held.get(s, 0) == 0]


@pytest.mark.parametrize("model", MODELS)
def test_every_request_gets_its_solo_generate_tokens_in_every_mode(model):
    net = model_for(model)
    lengths = target_lengths(STOP, N, S, seed=0).tolist()
    assert len(set(lengths)) > 3 and 1 in lengths, "lengths must differ, one ending at its first token"
    prompts = prompt_ids(net.config, N, P, seed=0)  # (N, P): request i is row i
    pad = eos_ids(net.config)[0]
    static = serve(model, **MODES["static"])
    assert static.tokens.shape == (N, P + S)
    for i, length in enumerate(lengths):
        alone = solo(net, prompts[i], length)
        assert torch.equal(static.tokens[i, : P + length - 1], alone[: P + length - 1]), i  # its own tokens
        assert (static.tokens[i, P + length - 1 :] == pad).all(), i  # the drawn length says EOS, then padding
    assert len({tuple(r) for r in static.tokens[:, P : P + 3].tolist()}) == N, "requests must differ"
    for name, (variant, fields) in {
        "continuous": ("static_cache", MODES["continuous"]),
        "hf_generate_batch": ("hf_generate_batch", {}),
    }.items():
        assert torch.equal(serve(model, variant, **fields).tokens, static.tokens), name


@pytest.mark.parametrize("continuous", [False, True])
def test_slots_run_the_forwards_their_admission_rule_implies(continuous):
    """A request ended one step early or late, a refill held back or a stop check skipped all change the count."""
    lengths = target_lengths(STOP, N, S, seed=0).tolist()
    server = make_generator(model_for("tiny"), spec_for("tiny", batching="continuous" if continuous else "static"))
    checks = []
    server.stop_check = lambda *args, _check=server.stop_check: checks.append(1) or _check(*args)
    got = server()
    assert got.steps == simulated_forwards(lengths, SLOTS, continuous)
    assert len(checks) == len(set(got.latencies_s))  # the host waits once per time it learns of ends
    if not continuous:  # batch after batch: each runs as long as its longest request
        assert got.steps == sum(max(lengths[i : i + SLOTS]) for i in range(0, N, SLOTS))


def test_continuous_serves_in_fewer_forwards_and_fills_more_slot_steps():
    static, continuous = (serve("tiny", stop="lognormal:4,1.0", requests=12, **m) for m in MODES.values())
    assert continuous.steps < static.steps
    lengths = request_lengths(spec_for("tiny", stop="lognormal:4,1.0", requests=12), static.tokens, [50256])
    figures = {name: serving_figures([run], int(lengths.sum())) for name, run in (("s", static), ("c", continuous))}
    assert 0 < figures["s"]["slot_occupancy"] < figures["c"]["slot_occupancy"] <= 1
    assert all(0 < t for t in continuous.latencies_s)
    for run in (static, continuous):  # answered in the order they end (the first batch: admitted together)
        order = sorted(range(SLOTS), key=lambda i: (lengths[i], i))
        assert [run.latencies_s[i] for i in order] == sorted(run.latencies_s[i] for i in order)
    assert max(static.latencies_s[:SLOTS]) < min(static.latencies_s[SLOTS : 2 * SLOTS])  # batch after batch


def test_decode_is_always_slots_by_one_and_admissions_slots_by_prompt():
    """Two fixed shapes: decode (S, 1) on the compiled model, admission (S, P) on its decoder alone."""
    net = model_for("llama-tiny")
    shapes = []
    hook = net.base_model.register_forward_pre_hook(
        lambda m, args, kwargs: shapes.append(tuple((args[0] if args else kwargs["input_ids"]).shape)), with_kwargs=True
    )
    try:
        got = serve("llama-tiny", "static_cache_continuous")
    finally:
        hook.remove()
    assert len(shapes) == got.steps and shapes[0] == (SLOTS, P)
    assert set(shapes) == {(SLOTS, P), (SLOTS, 1)}
    assert 1 < shapes.count((SLOTS, P)) < N  # refills arrive apart, and some together


@pytest.fixture(scope="module")
def eos_model():
    """llama-tiny with EOS ids [its own (never said: it pads), then one id per request but the last,
    said by that request alone, first at a step no other chosen id is where one is]: under stop=model
    the requests end on their own at different steps, and the last one runs to max_seqlen."""
    never = serve("llama-tiny", stop="never").tokens[:, P:]  # (N, S)
    net = build_model("llama-tiny", "float32", "cpu", seed=0)
    pad = eos_ids(net.config)[0]
    assert pad not in never
    rows, chosen, ends = never.tolist(), [], []
    for i, row in enumerate(rows[:-1]):
        others = {t for j, other in enumerate(rows) if j != i for t in other}
        options = sorted((row.index(t) in ends, row.index(t) == 0, row.index(t), t) for t in set(row) - others)
        *_, end, token = options[0]
        chosen.append(token)
        ends.append(end)
    net.config.eos_token_id = net.generation_config.eos_token_id = [pad, *chosen]
    return net, never, ends + [None], pad


def test_stop_model_ends_each_request_at_its_eos_or_at_max_seqlen(eos_model):
    net, never, ends, pad = eos_model
    runs = {name: serve("llama-tiny", net=net, stop="model", **fields) for name, fields in MODES.items()}
    runs["peer"] = make_generator(net, spec_for("llama-tiny", "hf_generate_batch", stop="model"))()
    assert len(set(ends)) >= 4
    for name, got in runs.items():
        for i, end in enumerate(ends):
            stop = S if end is None else end + 1  # the EOS itself is kept
            assert torch.equal(got.tokens[i, P : P + stop], never[i, :stop]), (name, i)
            assert (got.tokens[i, P + stop :] == pad).all(), (name, i)
    lengths = request_lengths(spec_for("llama-tiny", stop="model"), runs["static"].tokens, eos_ids(net.config))
    assert lengths.tolist() == [S if e is None else e + 1 for e in ends]


class EagerCpu:
    """stop_checks' device primitives on the CPU, for a device that keeps up: the lagged checks'
    bookkeeping (one step run past the end they learn of) on real tensors."""

    def host_flag(self):
        return torch.zeros((), dtype=torch.bool)

    def event(self):
        return type("Event", (), {"record": lambda self: None, "synchronize": lambda self: None})()

    def stream(self):
        return type("Stream", (), {"wait_stream": lambda self, other: None})()

    current_stream = stream

    def use(self, stream):
        return contextlib.nullcontext()


@pytest.mark.parametrize("name", in_family("stop_check", LAGGED))
def test_lagged_checks_serve_the_same_tokens_one_step_late_per_segment(name, eos_model):
    """Under stop=model a slot run past its EOS says more than padding: the steps a lagged check runs
    too far (every declared lagged check, each given a CPU device) must not reach any request's tokens."""
    check = load("stop_check", name)
    net = eos_model[0]
    spec = spec_for("llama-tiny", "static_cache_continuous", stop="model")
    sync = make_generator(net, spec)()
    server = make_generator(net, spec)
    server.stop_check = functools.partial(check, device=EagerCpu())
    lagged = server()
    assert torch.equal(lagged.tokens, sync.tokens)
    assert lagged.steps > sync.steps  # each segment ran one step past the end it learned of


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"requests": -1}, "requests must be an integer >= 0"),
        ({"requests": 0, "batching": "continuous"}, r"set requests=N \(N > 0\) or use batching=static"),
        ({"requests": 0, "variant": "hf_generate_batch"}, "engine=generate_batch serves requests: set requests=N"),
        ({"cache": "none", "batching": "continuous"}, "requests with cache=none.*use cache=static"),
        ({"stop_check": "none", "batching": "continuous"}, "use stop_check=sync"),
        ({"variant": "hf_generate"}, "use engine=generate_batch"),
        ({"sampling": "topk:5"}, "use sampling=greedy"),
        ({"variant": "hf_generate_batch", "compile": "default"}, "compile=default.*use variant hf_generate_batch"),
    ],
)
def test_bad_request_workloads_are_one_line_naming_the_fix(fields, message):
    fields = dict(fields)
    spec = spec_for("tiny", fields.pop("variant", "static_cache"), **fields)
    problem = serving_problem(spec)
    assert problem and "\n" not in problem
    assert re.search(message, problem), problem


def test_good_request_workloads_and_batches_pass():
    for variant in ("static_cache", "static_cache_continuous", "hf_generate_batch", "static_cudagraph_continuous"):
        assert serving_problem(spec_for("tiny", variant)) is None, variant
    assert serving_problem(dataclasses.replace(spec_for("tiny", "baseline"), requests=0)) is None


@pytest.mark.parametrize("variant", ["static_cache_continuous", "hf_generate_batch"])
def test_a_request_trial_records_its_figures(variant):
    from tokengen.measure.trial import run_trial

    spec = dataclasses.replace(spec_for("tiny", variant, stop="lognormal:4,1.0", requests=9), warmup=0, runs=2)
    record = run_trial(spec)
    lengths = target_lengths("lognormal:4,1.0", 9, S, seed=0)
    assert record["useful_tokens"] == int(lengths.sum())
    assert record["tokens_generated"] == SLOTS * record["steps"]
    assert record["slot_occupancy"] == pytest.approx(record["useful_tokens"] / record["tokens_generated"])
    assert 0 < record["request_latency_p50_s"] <= record["request_latency_p90_s"] <= record["runtime_max_s"]
    assert record["deterministic"] and 0 < record["ttft_s"] < record["runtime_min_s"]


def test_the_report_pairs_static_continuous_and_the_peer_per_workload(tmp_path):
    """Written through the sweep's Recorder and read back as the report reads a sweep."""
    from tokengen.contract.trial_record import make_record
    from tracking.report import comparison
    from tracking.report.serving_table import serving_table
    from tracking.store.reading import load_sweep
    from tracking.store.recorder import Recorder

    uri = seeded_uri(tmp_path)
    recorder = Recorder(uri, "tokengen")
    recorder.start_sweep("serve", {}, resume=False)
    trials = [
        ("static_cache", 16, 4, 2.0, "a"),
        ("static_cache_continuous", 16, 4, 1.0, "a"),
        ("hf_generate_batch", 16, 4, 1.25, "b"),  # its tokens differ: flagged
        ("static_cache", 16, 8, 1.0, "a"),  # alone in its workload: nothing to pair
        ("static_cache", 0, 4, 1.0, "a"),
    ]  # a batch, not requests
    for variant, requests, slots, runtime, tokens in trials:
        spec = resolve(variant, model="tiny", requests=requests, batch_size=slots, stop="lognormal:10,1.0", runs=3)
        record = make_record(
            spec,
            key=spec.key(),
            steps=50,
            useful_tokens=100,
            runtime_mean_s=runtime,
            runtime_std_s=runtime / 100,
            useful_tokens_per_s=100 / runtime,
            slot_occupancy=0.5,
            request_latency_p50_s=runtime / 2,
            request_latency_p90_s=runtime,
            tokens_sha256=tokens,
        )
        recorder.record_trial(record)
    runs = load_sweep(uri, "tokengen", "serve")
    frame, _ = comparison.prepare(runs.trials, None, runs.client, {})
    table = serving_table(frame).set_index("variant")
    assert list(table.index) == ["static_cache", "static_cache_continuous", "hf_generate_batch"]
    assert table["vs_static"].tolist() == pytest.approx([1.0, 2.0, 1.6])
    assert table["vs_peer"].tolist() == pytest.approx([0.625, 1.25, 1.0])
    assert table.loc["static_cache_continuous", "vs_static_interval"].endswith("x")
    assert table.loc["static_cache", "vs_static_interval"] == ""  # itself
    assert table["same_tokens"].tolist() == ["", "ok", "MISMATCH"]
    assert table.loc["static_cache_continuous", "slot_occupancy"] == 0.5
    assert serving_table(frame[frame["requests"] == 0]) is None


@pytest.mark.slow
def test_compiled_decode_serves_the_same_tokens_and_compiles_once():
    """torch.compile over the (S, 1) decode step: every refill reuses its graph, and a second run compiles nothing."""
    from torch._dynamo.utils import counters

    eager = serve("llama-tiny", "static_cache_continuous")
    server = make_generator(model_for("llama-tiny"), spec_for("llama-tiny", "static_compiled_continuous"))
    got = server()
    graphs = counters["stats"]["unique_graphs"]
    again = server()
    assert counters["stats"]["unique_graphs"] == graphs
    assert torch.equal(got.tokens, eager.tokens) and torch.equal(again.tokens, eager.tokens)
    assert got.steps == eager.steps


GPU_LAG_CYCLES = 10_000_000  # ~5 ms of GPU spin before each step: the host runs as far ahead as the check lets it


@pytest.mark.gpu
@pytest.mark.parametrize(
    "variant, stop_check",
    [
        ("static_cache_continuous", "deferred"),
        ("static_cache_continuous", "pipelined"),
        ("static_cudagraph_continuous", "sync"),
        ("static_cudagraph_continuous", "deferred"),
    ],
)
def test_on_a_lagging_gpu_every_continuous_variant_serves_static_batchings_tokens(variant, stop_check):
    """CUDA streams, pinned flags and CUDA graphs for real, with the GPU made to fall behind the host:
    a slot refilled before its end lands, or a graph reading a stale position, changes the tokens."""
    net = build_model("llama-tiny", "float32", "cuda", seed=0)
    fields = {"device": "cuda", "stop": "uniform:1-12"}
    want = make_generator(net, spec_for("llama-tiny", "static_cache", **fields))()
    if variant != "static_cache_continuous":
        torch._dynamo.reset()  # earlier graphs and guards must not push this one into eager mode

    def lagging(step):
        def late_step(i):
            torch.cuda._sleep(GPU_LAG_CYCLES)
            step(i)

        return late_step

    server = make_generator(net, spec_for("llama-tiny", variant, stop_check=stop_check, **fields))
    server()  # compiles and records, where it does
    torch.cuda._sleep(4 * GPU_LAG_CYCLES)  # the origin stream lags too: a missing initial wait reads unwritten slots
    got = server(wrap_step=lagging)
    assert torch.equal(got.tokens.cpu(), want.tokens.cpu())


@pytest.mark.gpu
def test_on_the_gpu_static_and_continuous_serve_every_request_its_solo_generate_tokens():
    """The same requests three ways on CUDA: static batching, continuous batching, and each request
    alone through generate(): equal, request by request."""
    net = build_model("tiny", "float32", "cuda", seed=0)
    fields = {"device": "cuda"}
    lengths = target_lengths(STOP, N, S, seed=0).tolist()
    prompts = prompt_ids(net.config, N, P, seed=0, device="cuda")
    pad = eos_ids(net.config)[0]
    static = make_generator(net, spec_for("tiny", "static_cache", **fields))().tokens.cpu()
    continuous = make_generator(net, spec_for("tiny", "static_cache_continuous", **fields))().tokens.cpu()
    assert torch.equal(continuous, static)
    for i, length in enumerate(lengths):
        alone = solo(net, prompts[i], length).cpu()
        assert torch.equal(static[i, : P + length - 1], alone[: P + length - 1]), i
        assert (static[i, P + length - 1 :] == pad).all(), i
