"""The terminal view of one result: the article's runtime and memory table, plus throughput."""

from __future__ import annotations

from tokengen.contract.declarations import KNOBS, SPECULATIVE, plain
from tokengen.contract.trained import model_label
from tokengen.measure.interference import OK


def _gb(value) -> str:
    return "n/a" if value is None else f"{value / 1e9:.3f} GB"


def _ms(seconds) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.3f} ms"


def render(record: dict) -> str:
    r = record
    rule = "=" * 64
    frag = (
        "n/a"
        if r["mem_fragmentation_pct"] is None
        else f"{_gb(r['mem_fragmentation_bytes'])} ({r['mem_fragmentation_pct']:.1f}%)"
    )
    bandwidth = f"{r['weight_bandwidth_gbs']:.1f} GB/s"
    if r.get("weight_bandwidth_pct_of_peak") is not None:
        bandwidth += f" ({r['weight_bandwidth_pct_of_peak']:.1f}% of peak)"
    lines = [
        rule,
        f"{r['variant']}: {model_label(r['model'], r.get('model_heldout_loss'))} {r['dtype']} on "
        f"{r['env_gpu_name'] or r['device']}, "
        f"batch {r['batch_size']}, prompt {r['prompt_len']}, max_seqlen {r['max_seqlen']}, stop={r['stop']}",
        "  knobs: " + " ".join(f"{knob}={r.get(knob, plain(knob).name)}" for knob in KNOBS),
        "Runtime Results:",
        f"  Mean:   {r['runtime_mean_s']:.4f}s",
        f"  Std:    {r['runtime_std_s']:.4f}s",
        f"  Min:    {r['runtime_min_s']:.4f}s",
        f"  Max:    {r['runtime_max_s']:.4f}s",
        f"  Median: {r['runtime_median_s']:.4f}s   (first run {r['first_run_s']:.3f}s, {runs_text(r)})",
        measurement_line(r),
        "Throughput:",
        f"  Steps: {r['steps']}   Tokens/s: {r['tokens_per_s']:.1f}   Useful tokens/s: {r['useful_tokens_per_s']:.1f}",
        *ended_lines(r),
        *load_lines(r),
        f"  Time to first token: {_ms(r['ttft_s'])}   Time per output token: {_ms(r['tpot_s'])}",
        f"  Step latency: median {r['step_latency_median_s'] * 1e3:.3f} ms, p90 {r['step_latency_p90_s'] * 1e3:.3f} ms",
        f"  Weight streaming: {bandwidth}",
        "Memory Stats:",
        f"  Allocated bytes (peak): {_gb(r['mem_allocated_peak_bytes'])}",
        f"  Reserved bytes (peak):  {_gb(r['mem_reserved_peak_bytes'])}",
        f"  Fragmentation (peak):   {frag}",
        f"  Process peak RSS:       {_gb(r['peak_rss_bytes'])}",
        *profile_lines(r),
        *speculation_lines(r),
        *fidelity_lines(r),
        f"tokens_sha256 {r['tokens_sha256'][:16]}...  key {r['key']}",
        rule,
    ]
    return "\n".join(lines)


def ended_lines(r: dict) -> list[str]:
    """Where rows may end before max_seqlen, how many did: under stop=model, at the model's own EOS."""
    if r.get("stop") == "never" or r.get("rows_ended") is None or r.get("requests"):
        return []
    how = "at their own EOS" if r.get("stop") == "model" else "at their drawn length"
    return [f"  Rows ended before max_seqlen {how}: {r['rows_ended']} of {r['batch_size']}"]


def load_lines(r: dict) -> list[str]:
    """A request workload's latencies from each request's arrival and its verdict under the SLO
    (tokengen/measure/load_figures.py)."""
    if r.get("request_ttft_p50_s") is None:
        return []
    rates = ""
    if r.get("offered_rate_rps") is not None:
        rates = f"offered {_rate(r['offered_rate_rps'])} req/s, achieved {_rate(r['achieved_rate_rps'])}, "
    slo = f"p{r['slo_percentile']:g} TTFT <= {r['slo_ttft_s'] * 1e3:g} ms, TPOT <= {r['slo_tpot_s'] * 1e3:g} ms"
    return [
        f"  Requests ({r['requests_measured']} measured): {rates}goodput {_rate(r['goodput_rps'])} req/s",
        f"  TTFT p50/p99: {_ms(r['request_ttft_p50_s'])} / {_ms(r['request_ttft_p99_s'])}   "
        f"TPOT p50/p99: {_ms(r['request_tpot_p50_s'])} / {_ms(r['request_tpot_p99_s'])}   "
        f"SLO ({slo}): {'met' if r['slo_met'] else 'not met'}",
        *([f"  Note: {r['serving_note']}"] if r.get("serving_note") else []),
    ]


def _rate(value) -> str:
    """A rate, or n/a where too few requests made one (two measured requests that completed out of order)."""
    return "n/a" if value is None else f"{value:.2f}"


def runs_text(r: dict) -> str:
    """'10 timed runs', or for runs=auto '7 timed runs (auto: 95% CI +-1.4% of the mean)'."""
    done = r.get("runs_done") or r["runs"]
    text = f"{done} timed run{'s' * (done != 1)}"
    if r["runs"] == 0:
        ci = r.get("runtime_ci_rel")
        text += (
            " (auto"
            + (f": 95% CI +-{100 * ci:.1f}% of the mean, target {100 * r['target_ci']:.1f}%" if ci is not None else "")
            + ")"
        )
    return text


def measurement_line(r: dict) -> str:
    """'Measurement: ok', or what the machine did: 'Measurement: CONTENDED: others used 1.6 of 2 cores'."""
    verdict = r.get("measurement")
    if not verdict:
        return "Measurement: not judged"
    reasons = r.get("measurement_reasons")
    return f"Measurement: {verdict if verdict == OK else verdict.upper()}" + (f": {reasons}" if reasons else "")


def profile_lines(r: dict) -> list[str]:
    if r.get("profile", "off") == "off" or "profile_window" not in r:
        return []

    def us(name: str) -> str:
        return "n/a" if r.get(name) is None else f"{r[name]:.1f} us"

    busy = "n/a" if r.get("gpu_busy_pct") is None else f"{r['gpu_busy_pct']:.1f}%"
    return [
        f"Profile ({r['profile']}, steps {r['profile_window']}):",
        f"  GPU idle between steps: {us('gpu_idle_us_per_step')}   GPU busy: {busy}",
        f"  Host blocked in the stop check: {us('host_sync_us_per_step')} per step",
    ]


def speculation_lines(r: dict) -> list[str]:
    """For a trial whose advance verified proposals: how many it accepted, and what proposing cost."""
    if r.get("forwards_per_token") is None:
        return []

    def figure(name: str, form: str) -> str:
        return "n/a" if r.get(name) is None else format(r[name], form)

    return [
        f"Speculation: acceptance {figure('acceptance_rate', '.1%')}, {figure('accepted_per_verify', '.2f')} "
        f"proposed tokens accepted per verify forward, {figure('forwards_per_token', '.3f')} forwards per token, "
        f"proposing {figure('proposer_share', '.1%')} of the run"
    ]


def fidelity_lines(r: dict) -> list[str]:
    """For a trial held to the gate: its verdict and the figures behind it (nothing for an exact trial); for a
    speculative one, its tokens against its plain twin's."""
    if not r.get("fidelity_verdict"):
        return []

    def figure(name: str, form: str) -> str:
        return "n/a" if r.get(name) is None else format(r[name], form)

    step = r.get("first_divergence_step")
    if r.get("fidelity") == SPECULATIVE:
        return [
            f"Tokens against the same trial without speculation: {r['fidelity_verdict']} "
            f"({figure('rows_exact', 'd')} of {r['batch_size']} rows equal bit for bit)"
        ]
    return [
        f"Fidelity: {r['fidelity_verdict']} (gate {100 * r['fidelity_gate']:.0f}% top-1 agreement with the reference)",
        f"  Teacher-forced: top-1 agreement {figure('top1_agreement', '.2%')}, max logit diff "
        f"{figure('max_logit_diff', '.4g')}, KL {figure('kl_divergence', '.3g')}, reference margin (median) "
        f"{figure('top1_margin_median', '.3g')}",
        f"  Free-running: {figure('rows_exact', 'd')} of {r['batch_size']} rows exact, first divergence at step "
        f"{'none' if step is None else step}",
    ]
