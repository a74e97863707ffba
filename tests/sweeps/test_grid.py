"""Config composition and grid expansion: pure, no Ray, no MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from sweeps.driver import run_sweep
from sweeps.planning.config import SweepConfig, load_config, register
from sweeps.planning.grid import expand, plan_sweep
from tokengen.contract.declarations import values
from tokengen.contract.spec import SpecError

CONF = str(Path(__file__).resolve().parents[2] / "conf")
register()


def composed(*overrides: str) -> SweepConfig:
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return load_config(compose("config", overrides=list(overrides)))


def full_count() -> int:
    """+grid=full's trials from the declarations: our loop with every cache x compile mode (CUDA graphs on
    fixed-shape caches only) x stop check x allocator; generate() with its own check, compiling on fixed
    shapes only; times the workload axes (2 dtypes x 5 batches x 2 prompts x 3 lengths)."""
    loop = sum(
        not (mode.cuda_graphs and not cache.fixed_shapes) for cache in values("cache") for mode in values("compile")
    )
    peer = sum(1 + cache.fixed_shapes * (len(values("compile")) - 1) for cache in values("cache"))
    return (loop * len(values("stop_check")) + peer) * len(values("allocator")) * 2 * 5 * 2 * 3


def article_count() -> int:
    """Eight variants at three lengths, static_compiled with every stop check at six batch sizes, one shared."""
    return 8 * 3 + len(values("stop_check")) * 6 - 1


COUNTS = {
    "smoke": 16,
    "article": article_count(),
    "full": full_count(),
    "scaling": 192,
    "harness": 12,
    "serving": 12,
    "load": 4 * 4 * 2,  # variants x rates x burstiness
    "peak": 2 * 2,  # variants x the search's first round (its low and high rate)
    "gpu": 15,
    "gpu_peak": 2 * 2,  # the search's first round on the GPU
    "gpu_more": 18 + 3,  # and speculative decoding under CUDA graphs: the twin, prompt lookup, the draft
    "quant": 2 * 2 * (1 + 4 * 2),
    "speculative": 1 + 3 * 7 + 3,  # baseline; kv_cache, static_cache, hf_generate x every speculate value; compiled
}


@pytest.mark.parametrize("grid", COUNTS, ids=lambda g: f"+grid={g}")  # a bare `gpu` id would read as the gpu marker
def test_every_grid_composes_and_expands(grid):
    plan = plan_sweep(composed(f"+grid={grid}"))
    assert len(plan.trials) == COUNTS[grid]
    assert len({t.key for t in plan.trials}) == COUNTS[grid]


def test_every_grid_file_is_counted():
    assert {p.stem for p in Path(CONF, "grid").glob("*.yaml")} == set(COUNTS)


def test_any_knob_axis_is_set_without_a_plus_and_all_is_every_declared_value():
    plan = plan_sweep(composed("+grid=smoke", "grid.stop_check=all", "grid.variant=[static_cache]"))
    assert sorted({t.spec.stop_check for t in plan.trials}) == sorted(
        d.name for d in values("stop_check") if not d.cuda_only
    )
    assert any("needs a CUDA device" in reason for reason in plan.describe())
    assert {t.spec.cache for t in plan_sweep(composed("+grid=smoke", "grid.cache=[dynamic]")).trials} == {"dynamic"}
    with pytest.raises(SpecError, match="axis 'batch_size' has no fixed set of values for `all`"):
        expand(composed().trial, {"batch_size": "all"})
    with pytest.raises(SpecError, match="append one with"):
        plan_sweep(composed())


def test_the_gpu_grids_hold_the_articles_point_with_generates_peers_and_rehearse_on_a_cpu():
    config = composed("+grid=gpu")
    assert config.sweep.remeasure == 0 and config.trial["runs"] == 3  # GPU time is dear: fixed counts
    trials = plan_sweep(config).trials
    assert {(t.spec.model, t.spec.dtype, t.spec.batch_size) for t in trials} == {("gpt2", "float32", 32)}
    assert {
        "baseline",
        "static_cudagraph_pipelined",
        "static_cudagraph_every_k",
        "hf_generate",
        "hf_generate_static",
        "hf_generate_compiled",
        "hf_generate_cudagraph",
    } <= {t.spec.variant for t in trials}
    assert [t.spec.variant for t in trials if t.spec.profile == "nsys"] == ["static_compiled"]  # one nsys report
    more = plan_sweep(composed("+grid=gpu_more")).trials
    assert {t.spec.variant for t in more if t.spec.model == "gpt2-xl"} == {
        "static_cudagraph_pipelined",
        "hf_generate_cudagraph",
        "static_cudagraph_pipelined_int8",
        "static_cudagraph_pipelined_int4",
    }  # weight-only quantization where weight bytes decide the step
    assert {t.spec.variant for t in more if t.spec.dtype == "bfloat16" and t.spec.model == "gpt2"} == {
        "static_cudagraph_pipelined",
        "static_cudagraph_deferred",
        "hf_generate_compiled",
        "hf_generate_cudagraph",
    }
    assert {t.spec.variant for t in more if t.spec.requests} == {
        "static_cache",
        "static_cache_continuous",
        "hf_generate_batch",
    }
    assert {t.spec.variant for t in more if t.spec.model == "tiny-trained" and t.spec.stop == "model"} == {
        "kv_cache",
        "kv_cache_int8",
        "static_cudagraph",
        "static_cudagraph_int8",
        "static_cudagraph_lookup4",
        "static_cudagraph_draft4",
    }  # rows that end at the model's own EOS, int8 judged on logits that predict, speculation under CUDA graphs
    assert {t.spec.key() for t in trials}.isdisjoint({t.spec.key() for t in more})
    # scripts/gpu_sweep.sh --rehearse: the same grids on the CPU, models shrunk, CUDA-only rows dropped with reasons
    for grid in ("gpu", "gpu_more"):
        rehearsal = plan_sweep(
            composed(f"+grid={grid}", "trial.device=cpu", "+grid.model=[tiny]", "+grid.max_seqlen=[32]")
        )
        assert {t.spec.model for t in rehearsal.trials} == {"tiny"}
        assert any("needs a CUDA device" in reason for reason in rehearsal.dropped)
    assert "hf_generate_compiled" in {
        t.spec.variant for t in plan_sweep(composed("+grid=gpu", "trial.device=cpu", "+grid.model=[tiny]")).trials
    }


def test_smoke_tells_the_story_on_the_cpu_beside_the_generate_peers():
    plan = plan_sweep(composed("+grid=smoke"))
    assert all(t.spec.device == "cpu" and t.spec.model == "tiny" and t.spec.prompt_len == 8 for t in plan.trials)
    story = {(t.spec.variant, t.spec.max_seqlen) for t in plan.trials if t.spec.stop == "never"}
    for variant in (
        "baseline",
        "kv_cache",
        "static_cache",
        "static_compiled",
        "hf_generate",
        "hf_generate_static",
        "hf_generate_compiled",
    ):
        assert {(variant, 8), (variant, 48)} <= story, variant


def test_every_preset_on_the_cpu_drops_the_cuda_only_ones_with_one_reason_per_rule():
    plan = expand({**composed().trial, "model": "tiny"}, {"variant": "all"})
    reasons = plan.describe()
    assert len(reasons) == len(set(reasons)) >= 4
    assert any("stop_check=pipelined needs a CUDA device" in r for r in reasons)
    assert {"hf_generate", "hf_generate_static", "hf_generate_compiled"} <= {t.spec.variant for t in plan.trials}


def test_full_drops_cudagraphs_without_a_static_cache_and_peers_with_our_stop_checks():
    plan = plan_sweep(composed("+grid=full"))
    points = 2 * 5 * 2 * 3 * len(values("allocator"))
    graphed = [m for m in values("compile") if m.cuda_graphs]
    loose = [c for c in values("cache") if not c.fixed_shapes]
    assert plan.dropped == {
        **{
            f"compile={m.name} needs cache=static: CUDA graphs want fixed shapes":  # both engines
            2 * len(loose) * len(values("stop_check")) * points
            for m in graphed
        },
        "engine=generate has its own stop check: use stop_check=sync": (len(values("stop_check")) - 1)
        * points
        * (len(values("cache")) * len(values("compile")) - len(graphed) * len(loose)),
        **{
            f"engine=generate compiles only with cache=static (cache={c.name} stays eager): use cache=static or "
            "compile=off": (len(values("compile")) - 1 - len(graphed)) * points
            for c in loose
        },
    }
    variants = {t.spec.variant for t in plan.trials}
    assert variants >= {
        "baseline",
        "static_cudagraph_deferred",
        "hf_generate",
        "hf_generate_compiled",
        "kv_cache_compiled_deferred",
    }  # a combination no preset names has a name made like theirs
    assert "custom" not in variants and len(plan.trials) == 5520  # quant and attention stay at their plain values
    assert {t.spec.prompt_len for t in plan.trials} == {1, 128}


def test_article_dedups_the_shared_row_and_scaling_replicates_per_gpu_type():
    article = plan_sweep(composed("+grid=article"))
    assert article.duplicates == 1
    scaling = plan_sweep(composed("+grid=scaling", "sweep.accelerator_types=[L40S,H100,H200]"))
    assert len(scaling.trials) == 288
    assert {t.accelerator_type for t in scaling.trials} == {"L40S", "H100", "H200"}
    one = [t for t in scaling.trials if t.spec == scaling.trials[0].spec]
    assert len(one) == 3 and len({t.key for t in one}) == 3


def test_axes_and_fixed_values_change_on_the_command_line():
    plan = plan_sweep(composed("+grid=smoke", "grid.batch_size=[1,2,3]", "grid.variant=[kv_cache]", "trial.runs=1"))
    assert sorted({t.spec.batch_size for t in plan.trials}) == [1, 2, 3]
    assert len(plan.trials) == 6 and all(t.spec.runs == 1 for t in plan.trials)
    blocks = plan_sweep(composed("+grid=article", "++grid.batch_size=[4]"))
    assert {t.spec.batch_size for t in blocks.trials} == {4}


def test_variant_knobs_beat_trial_defaults_and_axes_beat_variants():
    trial = composed().trial
    plan = expand(trial, {"variant": ["static_compiled"], "compile": ["off"]})
    assert [t.spec.variant for t in plan.trials] == ["static_cache"]


def test_exclude_rules_drop_matching_points():
    trial = composed().trial
    grid = {
        "variant": ["baseline", "kv_cache"],
        "max_seqlen": [100, 400],
        "exclude": [{"variant": "baseline", "max_seqlen": [400]}],
    }
    plan = expand(trial, grid)
    assert len(plan.trials) == 3
    assert list(plan.dropped.values()) == [1]


@pytest.mark.parametrize(
    "grid, message",
    [
        ({"batchsize": [1]}, "grid axis 'batchsize' is not a trial field"),
        ({"variant": ["turbo"]}, "unknown variant 'turbo'"),
        ({"model": ["gpt9"]}, "unknown model 'gpt9'"),
        ({"stop": ["sometimes"]}, "is not understood"),
        ({"variant": ["static_compiled_pipelined"]}, "expands to no runnable trial"),
        ({"exclude": [{"colour": "red"}]}, "not trial fields"),
        ({"batch_size": []}, "has no values"),
    ],
)
def test_config_errors_are_one_line(grid, message):
    with pytest.raises(SpecError, match=message):
        expand(composed().trial, grid)


def test_typo_in_a_trial_field_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException):
        composed("trial.batchsize=3")


def test_config_error_stops_the_sweep_before_ray_starts(capsys, tmp_path):
    import ray

    config = composed("+grid=smoke", "+grid.model=[gpt9]", f"tracking.uri=sqlite:///{tmp_path}/m.db")
    assert run_sweep(config) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: grid point") and "unknown model 'gpt9'" in err[-1]
    assert not ray.is_initialized()
    assert run_sweep(composed()) == 2
    assert "append one with +grid=NAME" in capsys.readouterr().err
    assert run_sweep(composed("+grid=smoke", "sweep.name='a/b'")) == 2
    assert "use a name of letters, digits" in capsys.readouterr().err
