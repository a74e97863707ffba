"""What each table of the report says about itself: the note printed under its title."""

from __future__ import annotations

from tokengen.contract.declarations import LAGGED, REFERENCE, in_family
from tracking.measurement import MARK

_REFERENCE = in_family("stop_check", REFERENCE)[0]
NOTES = {
    "overview": "Speedup: geometric mean, min and max over the variant's trials; not_significant: how many of "
    "them have a 95% interval that holds 1.0; vs_generate: runtime over the fastest transformers "
    "generate() peer at the same point (below 1.0: faster than the library).",
    "a": "speedup = the matching baseline's runtime_mean_s / the trial's (same {match}); `compared` = `run`, or "
    "`step` where the two ran different numbers of steps (a no-check variant under a length distribution "
    "runs every step): then time per step is compared. interval: 95% interval of the ratio of mean runtimes "
    "(delta method on the log scale, Student t with Welch's degrees of freedom, from each trial's mean, "
    "std and timed runs); `~` marks one that holds 1.0, not significant. runtime_cv: run-to-run std / mean. "
    "ttft_s: time to first token (prefill and first sample), tpot_s: time per output token after it. "
    "vs_generate: runtime over the fastest generate() peer at the same point. tokens: `ok` = the "
    "reference's tokens: the baseline's (measured with the same code), else `vs twin V` (the trial with every "
    "knob but its cache and compile at its plain value), else `vs peer V` (a generate() peer); `unchecked` where "
    "none ran at the point. float32 must match exactly (else MISMATCH); in lower precision, {how}. "
    "env_vs_baseline (shown where any differ): what differs between where the trial and its baseline were "
    "measured (device, versions, threads, model files): such a speedup is not the variant's alone.",
    "marked_overview": "Marked speedups stay out of a variant's geometric mean, min and max while it has an "
    "unmarked one; where every one is marked, the figures are theirs, marked (marked: how many of the variant's "
    "trials carry a mark).",
    "marked": MARK + " marks a figure that may be wrong: measured by a trial judged noisy (its spread stayed above "
    "target after max_runs) or contended (the machine interfered): column `measurement` of (a), the reasons in "
    "results.csv; or derived from one (a speedup, ratio, gain, overhead, exponent or cost whose baseline, twin or "
    "peer was); a speedup also where its tokens are below the fidelity gate or unchecked.",
    "attempts": "attempt: which of the key's measurements speaks for it (remeasured: ok first, then the lowest "
    "runtime_cv).",
    "b": "CUDA caching allocator peaks; fragmentation = reserved - allocated, as the article defines it (n/a on "
    "the CPU, where peak_rss_bytes is the process's).",
    "c": "runtime_mean_s (s) per max_seqlen; steps = decode steps taken at each; exponent = slope of log runtime "
    "over log steps taken: ~2 is O(N^2) (full recompute), ~1 is O(N) (a KV cache); n/a where a length "
    "distribution ended every max_seqlen at the same step.",
    "d": f"Each lagged stop check ({', '.join(in_family('stop_check', LAGGED))}) beside the {_REFERENCE} check "
    f"with the same cache and compile; gain_pct = time saved over {_REFERENCE}.",
    "e": "Per decode step (a no-check run takes all max_seqlen steps, a checked one stops with its batch); "
    "overhead_pct = extra time per step over the no-check variant with the same cache and compile.",
    "f": "One column per GPU type, the trials run on more than one side by side.",
    "cost": "Cost per million useful tokens = the sweep's price per device-hour (sweep.prices, saved with the "
    "sweep's configuration) / 3600 / useful tokens per second x 1e6; useful tokens exclude padding. "
    "J/token: NVML's energy counter over the timed runs per useful token (n/a without a counter).",
    "serving": "Request workloads: useful tokens/s (padding excluded), request latency p50/p90 from the run's "
    "start, slot occupancy (slot-steps that produced a useful token); vs_static and vs_peer: useful "
    "tokens/s over the static-batching and generate_batch trials of the same workload, with 95% "
    "intervals; same_tokens: the checksum equals the static trial's.",
    "load": "Requests arriving over time (request_rate, burstiness or a request_trace), open loop; each figure from "
    "a request's own arrival, warm-up and drain left out, the median over the timed runs: offered rate (the drawn "
    "schedule's own), achieved rate (completions; below offered, the server falls behind, said in serving_note), "
    "TTFT and TPOT p50/p99 (a p99 of fewer than 100 requests is their maximum, said there too), output tokens/s, "
    "goodput (requests/s within both limits) and slo_met (both percentiles within their limits and the server "
    "keeping up), under the SLO {slo}.",
    "peak": "Per load curve and variant: the highest offered rate among the grid's rates at which the SLO was met "
    "and the server kept up, its goodput there, and the lowest rate above it that failed: the peak lies between the "
    "two, to the grid's resolution; failed_below counts the lower rates that failed all the same (noise, or a "
    "machine shared with other processes).",
    "search": "Per peak search (sweep.peak_low_rps, peak_high_rps, peak_precision): peak_rps is the highest "
    "nominal rate that met the SLO below every rate that failed, fails_at_rps the lowest that failed; the peak lies "
    "between, `within` their ratio less one (at most the search's precision once it converged). `probed` lists the "
    "probes in the order they ran; offered_at_peak_rps is the drawn schedule's own rate there (a draw of N requests "
    "is off its nominal rate by about 1/sqrt(N)); requests_per_usd is the goodput at peak_rps per dollar of the device's price "
    "(sweep.prices). One probe decides each rate: a noisy verdict near the peak moves the figure by a step.",
    "compile": "Each compiled graph's cold compile (cold_first_run_s: the first run of the trial that compiled it) "
    "beside its twins' warm loads of it (sweep.inductor_cache=shared): how many, their median first run "
    "and time to unpack the graphs, warm over cold. (a)'s first_run_s is each trial's own.",
    "knob": "Each trial beside its twin at the knob's plain value (the workload and every other knob equal): "
    "vs_plain = the twin's runtime_mean_s / the trial's, with its 95% interval; weight_bytes: what a step "
    "streams; tokens: the trial's verdict (a lossy or equivalent value's top-1 agreement with the reference "
    "model, judged at the sweep's gate; an exact value's tokens against its reference, as in (a)).",
    "idle": "From the profiled run: GPU idle time and host sync time per decode step, GPU busy share.",
    "advance": "Each trial beside its twin at the knob's plain value (the workload and every other knob equal, the "
    "engine too: transformers' own speculation beside plain generate()): vs_plain = the twin's runtime_mean_s / "
    "the trial's, with its 95% interval; acceptance_rate = accepted / proposed tokens, accepted_per_verify = "
    "proposed tokens accepted per verify forward (each verify also makes one token of its own), "
    "forwards_per_token = the model's forwards per generated token (1.0 one token at a time), proposer_share = the "
    "run's time spent proposing (draft forwards, n-gram search); vs_library = the fastest transformers engine's "
    "runtime at the same point and value over ours (above 1.0: ours is faster); tokens: bit for bit against the "
    "twin run in the trial's process, `ok`, or the first step where a row diverged and the twin's top-1/top-2 "
    "margin there (`near-tie` under the dtype's threshold), never ok.",
}
