"""Weight-only quantization and the attention kernel: held to the fidelity gate, never to a checksum.

A quantized trial measures itself against the unquantized model at its own point (tokengen/measure/agreement.py).
On random weights the logits' margins are tiny, so the verdict only reports the figure; on a model with decisive
logits (here: the tiny preset saved as a checkpoint with its final norm scaled up, so a top-1 token leads by about
13 logits) int8 passes the 99% gate, and a quantization whose scales are spoiled falls below it. GPT-2's
projections are Conv1D, which quantize_ skips: every block's weights must come out quantized.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from tokengen import models
from tokengen.contract.declarations import KNOBS, LOSSY, declared, names, plain
from tokengen.contract.fidelity import RANDOM_WEIGHTS
from tokengen.contract.rules import capability_problem, problem, resolve
from tokengen.engines import make_generator
from tokengen.knobs import on_model
from tokengen.measure import agreement
from tracking.report.comparison import prepare
from tracking.report.knob_tables import knob_tables

QUANTIZED = [d.name for d in (declared("quant", n) for n in names("quant")) if d.fidelity == LOSSY and not d.cuda_only]
CPU_QUANT = QUANTIZED[0]
POINT = dict(cache="dynamic", batch_size=4, max_seqlen=16)


@pytest.fixture(scope="module")
def decisive(tmp_path_factory) -> str:
    """The tiny preset's weights with its final norm scaled by 30: the same model, decisive logits."""
    path = tmp_path_factory.mktemp("decisive")
    net = models.build_model("tiny", "float32", "cpu", 0)
    with torch.no_grad():
        net.transformer.ln_f.weight.mul_(30)
    net.save_pretrained(path)
    return str(path)


def quantized(spec):
    return on_model(models.build_model(spec.model, spec.dtype, spec.device, spec.seed), spec)


def test_every_linear_weight_of_gpt2_is_quantized_not_only_the_head():
    spec = resolve(None, model="tiny", quant=CPU_QUANT, **POINT)
    net = quantized(spec)
    plain_net = models.build_model("tiny", "float32", "cpu", 0)
    kinds = {type(m.weight).__name__ for m in net.modules() if isinstance(m, torch.nn.Linear)}
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 4 * net.config.n_layer + 1 and "Tensor" not in kinds and "Parameter" not in kinds
    linear_bytes = sum(t.numel() * t.element_size() for m in linears for t in models.stored_tensors(m.weight))
    plain_bytes = sum(m.weight.numel() * 4 for m in plain_net.modules() if isinstance(m, torch.nn.Linear))
    plain_bytes += sum(4 * m.weight.numel() for m in plain_net.modules() if type(m).__name__ == "Conv1D")
    assert linear_bytes < 0.3 * plain_bytes  # int8 data and per-row scales: about a quarter of float32


def test_the_cli_measures_a_quantized_trial_against_the_model_itself(tiny_trial):
    record = tiny_trial("--quant", CPU_QUANT)
    assert record["fidelity"] == LOSSY and 0.5 <= record["top1_agreement"] <= 1.0
    assert record["fidelity_verdict"].startswith(f"{LOSSY} ") and record["fidelity_verdict"].endswith(RANDOM_WEIGHTS)
    assert record["rows_exact"] is not None and record["top1_margin_median"] > 0 and record["fidelity_gate"] == 0.99


def test_on_decisive_logits_int8_passes_the_gate_and_a_spoiled_quantization_falls_below(decisive):
    spec = resolve(None, model=decisive, quant=CPU_QUANT, **POINT)
    net = quantized(spec)
    passed = agreement.measure(spec, net, None, 0.99)
    assert passed["top1_margin_median"] > 5 and passed["top1_agreement"] >= 0.99
    assert passed["fidelity_verdict"] == f"{LOSSY} {100 * passed['top1_agreement']:.1f}%"
    generator = torch.Generator().manual_seed(0)
    for module in net.modules():  # each output row's scale off by up to 80%: a broken quantization
        if isinstance(module, torch.nn.Linear):
            module.weight.scale.mul_(torch.empty(module.weight.scale.shape).uniform_(0.2, 1.8, generator=generator))
    spoiled = agreement.measure(spec, net, None, 0.99)
    assert spoiled["top1_agreement"] < 0.99 and spoiled["fidelity_verdict"].startswith("below gate ")


def test_an_exact_trial_measures_no_fidelity():
    spec = resolve(None, model="tiny", **POINT)
    assert agreement.measure(spec, models.build_model("tiny", "float32", "cpu", 0), None, 0.99) == {}


def test_values_a_device_cannot_run_are_refused_in_one_line():
    for knob in ("quant", "attention"):
        for value in (declared(knob, n) for n in names(knob)):
            reason = problem(resolve(None, model="tiny", **{knob: value.name}))
            if value.cuda_only:
                assert reason == f"{knob}={value.name} needs a CUDA device (got device=cpu)"
            if value.dtypes:
                wrong = problem(resolve(None, model="tiny", device="cuda", **{knob: value.name}))
                assert wrong.startswith(f"{knob}={value.name} runs in {value.dtypes[0]} only")
            if value.min_capability:
                spec = resolve(
                    None,
                    model="tiny",
                    device="cuda",
                    dtype=value.dtypes[0] if value.dtypes else "float32",
                    **{knob: value.name},
                )
                assert "compute capability" in capability_problem(spec, (7, 5))
                assert capability_problem(spec, value.min_capability) is None
    flash = resolve(None, model="tiny", device="cuda", cache="static", attention="flash")
    assert "takes no explicit attention mask" in problem(flash)


def test_every_cpu_attention_backend_runs_a_step_and_keeps_to_the_gate():
    for value in (declared("attention", n) for n in names("attention")):
        if value.cuda_only or value.name == plain("attention").name:
            continue
        for cache in ("dynamic", "static"):
            spec = resolve(None, model="tiny", attention=value.name, **{**POINT, "cache": cache})
            net = models.build_model("tiny", "float32", "cpu", 0)
            assert make_generator(net, spec)().tokens.shape == (4, 17)
        found = agreement.measure(spec, net, None, 0.99)
        assert found["fidelity"] == value.fidelity and found["top1_agreement"] == 1.0


def test_the_report_shows_the_gate_never_ok_and_flags_a_speedup_below_it(tiny_trial):
    records = [
        tiny_trial("--variant", name, *[f"--{k}={v}" for k, v in extra.items()])
        for name, extra in (("baseline", {}), ("kv_cache", {}), ("kv_cache", {"quant": CPU_QUANT}))
    ]
    frame = pd.DataFrame([{**r, "trial_key": r["key"], "run_id": r["key"], "gpu_type": None} for r in records])
    prepared, _ = prepare(frame)
    verdicts = dict(zip(prepared["variant"], prepared["tokens"]))
    assert verdicts["kv_cache"] == "ok" and verdicts[f"kv_cache_{CPU_QUANT}"].startswith(f"{LOSSY} ")
    [(knob, table)] = knob_tables(prepared)
    assert knob == "quant" and list(table["plain_variant"]) == ["kv_cache"] and table["interval"][0]
    trained = frame.assign(model="/models/trained", top1_agreement=[None, None, 0.931])  # as if a checkpoint's
    prepared, _ = prepare(trained.assign(top1_margin_median=[None, None, 2.5]))  # its logits decisive
    row = prepared[prepared["variant"] == f"kv_cache_{CPU_QUANT}"].iloc[0]
    assert row["tokens"] == "below gate 93.1%" and bool(row["speedup_marked"])
    prepared, _ = prepare(trained.assign(top1_margin_median=[None, None, 0.45]))  # too close to judge
    row = prepared[prepared["variant"] == f"kv_cache_{CPU_QUANT}"].iloc[0]
    assert row["tokens"] == "lossy 93.1%, fidelity only (reference margin 0.45 < 1.0)"
    assert set(KNOBS) <= set(prepared.columns)
