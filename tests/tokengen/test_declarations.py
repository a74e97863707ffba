"""The knobs' declarations are the one list of their values: everything else is derived and checked here.

Each test runs over the declarations, so a value added there is covered with no line added here.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from tokengen.cli import build_parser, main
from tokengen.contract import declarations
from tokengen.contract.declarations import DECLARED, load, names, values
from tokengen.contract.rules import CUDA_ONLY, cuda_only_reason, incompatibility, resolve
from tokengen.contract.spec import CHOICES, KNOBS, TrialSpec
from tokengen.contract.variants import CUSTOM, VARIANTS, knobs_for, label_for

TRIAL_MD = Path(__file__).resolve().parents[2] / "docs" / "trial.md"
IDS = [f"{d.knob}={d.name}" for d in DECLARED]

# The preset names users typed before presets were generated, with their knobs: none may change.
_K = ("cache", "compile", "stop_check", "allocator", "engine", "batching")
_LATER = {knob: declarations.plain(knob).name for knob in declarations.KNOBS if knob not in _K}  # plain in each
NAMES_USERS_TYPE = {
    name: {**dict(zip(_K, knobs)), **_LATER}
    for name, knobs in {
        "baseline": ("none", "off", "sync", "default", "loop", "static"),
        "kv_cache": ("dynamic", "off", "sync", "default", "loop", "static"),
        "kv_cache_expandable": ("dynamic", "off", "sync", "expandable", "loop", "static"),
        "static_cache": ("static", "off", "sync", "default", "loop", "static"),
        "static_compiled": ("static", "default", "sync", "default", "loop", "static"),
        "static_compiled_pipelined": ("static", "default", "pipelined", "default", "loop", "static"),
        "kv_cache_nocheck": ("dynamic", "off", "none", "default", "loop", "static"),
        "static_cache_nocheck": ("static", "off", "none", "default", "loop", "static"),
        "static_compiled_nocheck": ("static", "default", "none", "default", "loop", "static"),
        "kv_cache_deferred": ("dynamic", "off", "deferred", "default", "loop", "static"),
        "static_cache_deferred": ("static", "off", "deferred", "default", "loop", "static"),
        "static_compiled_deferred": ("static", "default", "deferred", "default", "loop", "static"),
        "static_cudagraph": ("static", "reduce-overhead", "sync", "default", "loop", "static"),
        "static_cudagraph_pipelined": ("static", "reduce-overhead", "pipelined", "default", "loop", "static"),
        "static_cudagraph_deferred": ("static", "reduce-overhead", "deferred", "default", "loop", "static"),
        "static_cudagraph_nocheck": ("static", "reduce-overhead", "none", "default", "loop", "static"),
        "hf_generate": ("dynamic", "off", "sync", "default", "generate", "static"),
        "hf_generate_static": ("static", "off", "sync", "default", "generate", "static"),
        "hf_generate_compiled": ("static", "default", "sync", "default", "generate", "static"),
        "hf_generate_cudagraph": ("static", "reduce-overhead", "sync", "default", "generate", "static"),
        "static_cache_continuous": ("static", "off", "sync", "default", "loop", "continuous"),
        "static_compiled_continuous": ("static", "default", "sync", "default", "loop", "continuous"),
        "static_cudagraph_continuous": ("static", "reduce-overhead", "sync", "default", "loop", "continuous"),
        "static_cudagraph_deferred_continuous": (
            "static",
            "reduce-overhead",
            "deferred",
            "default",
            "loop",
            "continuous",
        ),
        "hf_generate_batch": ("static", "off", "sync", "default", "generate_batch", "continuous"),
    }.items()
}


def test_the_declared_knobs_are_the_specs_knobs_and_its_defaults_their_first_values():
    assert set(declarations.KNOBS) == set(KNOBS)
    assert {knob: getattr(TrialSpec(), knob) for knob in KNOBS} == {knob: names(knob)[0] for knob in KNOBS}
    assert len({(d.knob, d.name) for d in DECLARED}) == len(DECLARED), "a value is declared twice"


@pytest.mark.parametrize("value", DECLARED, ids=IDS)
def test_every_declaration_names_an_importable_implementation(value):
    for attribute in ("impl", "server"):
        path = getattr(value, attribute)
        assert path is None or load(value.knob, value.name, attribute) is not None, path
    assert value.doc and "\n" not in value.doc


@pytest.mark.parametrize("value", DECLARED, ids=IDS)
def test_the_cli_offers_and_the_rules_judge_every_declared_value(value):
    flag = "--" + value.knob.replace("_", "-")
    assert value.name in CHOICES[value.knob]
    assert build_parser().parse_args([flag, value.name]).__dict__[value.knob] == value.name
    assert (value.name in CUDA_ONLY.get(value.knob, ())) == value.cuda_only
    reason = cuda_only_reason(resolve(None, device="cpu", **{value.knob: value.name}))
    assert (reason == f"{value.knob}={value.name} needs a CUDA device (got device=cpu)") == value.cuda_only, reason


@pytest.mark.parametrize("value", [d for d in DECLARED if d.cuda_only], ids=lambda d: f"{d.knob}={d.name}")
def test_a_cuda_only_value_is_refused_in_one_line_on_a_cpu(value, capsys):
    flag = "--" + value.knob.replace("_", "-")
    assert main(["--model", "tiny", "--cache", "static", flag, value.name]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {value.knob}={value.name} needs a CUDA device (got device=cpu)", err


def test_the_names_users_type_keep_their_knobs():
    assert {name: VARIANTS.get(name) for name in NAMES_USERS_TYPE} == NAMES_USERS_TYPE


def test_every_combination_of_values_has_a_name_of_its_own_that_leads_back_to_it():
    """No `custom` bucket: label_for names each of the product of every knob's values, no two alike, a preset by
    its own name, and a generated name resolves to its knobs (the grid's and the CLI's --variant)."""
    combinations = [dict(zip(KNOBS, c)) for c in itertools.product(*(names(k) for k in KNOBS))]
    labels = [label_for(knobs) for knobs in combinations]
    assert len(set(labels)) == len(combinations) and CUSTOM not in labels
    assert all(label_for(knobs) == name for name, knobs in VARIANTS.items())
    for knobs, name in list(zip(combinations, labels))[::97]:
        assert knobs_for(name) == knobs
    assert label_for({**VARIANTS["static_compiled_pipelined"], "quant": "int8"}) == "static_compiled_pipelined_int8"


def test_a_compile_mode_with_cuda_graphs_needs_a_fixed_shape_cache():
    for mode in (d for d in values("compile") if d.cuda_graphs):
        for cache in values("cache"):
            spec = resolve(None, device="cuda", cache=cache.name, compile=mode.name)
            reason = f"compile={mode.name} needs cache=static: CUDA graphs want fixed shapes"
            assert (incompatibility(spec) == reason) == (not cache.fixed_shapes), (mode.name, cache.name)


def _knob_lines() -> list[str]:
    text = TRIAL_MD.read_text()
    section = text.split("## Knob values", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("- ")]


@pytest.mark.parametrize("value", DECLARED, ids=IDS)
def test_every_declared_value_has_its_line_in_docs_trial_md(value):
    lines = [line for line in _knob_lines() if re.match(rf"- `{re.escape(value.knob)}={re.escape(value.name)}`", line)]
    assert len(lines) == 1, f"docs/trial.md's 'Knob values' needs one line '- `{value.knob}={value.name}`: ...'"


def test_docs_trial_md_lists_no_value_that_is_not_declared():
    listed = [re.match(r"- `(\w+)=([\w-]+)`", line).groups() for line in _knob_lines()]
    assert [(k, v) for k, v in listed if v not in names(k)] == []


def test_the_report_benchmark_synthesizes_a_trial_for_every_preset():
    """benchmarks/report_speed.py's runtimes and tokens come from the declarations' facts: every preset,
    a generated one included, gets a record (no table of names to fall behind)."""
    import importlib.util

    import numpy as np

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "report_speed.py"
    spec = importlib.util.spec_from_file_location("report_speed", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(0)
    for variant in VARIANTS:
        record, tokens = bench.trial(variant, 4, 100, "float32", "H100", rng)
        assert record.spec.variant == variant and record.result.runtime_mean_s > 0 and tokens.shape[0] == 4
