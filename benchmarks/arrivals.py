"""Is the arrival schedule honoured? The request server loaded open loop at rates it can sustain.

A request workload with `request_rate` (tokengen/contract/arrivals.py) is served by the request server
(tokengen/engines/request_server.py), whose arrival thread (tokengen/engines/arrival_clock.py) registers each request
at its scheduled time on the host clock. This benchmark serves the same workload at a few rates, each well inside what
the server sustains here, and reports per rate:

- achieved_over_offered: the measured requests' completion rate over their own drawn arrival rate
  (tokengen/measure/load_figures.py; warm-up and drain left out). 1.0 is a server that keeps up: below it, the
  server falls behind its arrivals;
- arrival_error_median_ms, arrival_error_p99_ms: when the server registered each arrival less its scheduled time,
  over every request of every run (the wait from arrival to prefill, as requests join between decode steps, is the
  queueing delay: reported apart, `queue_p50_ms`);
- idle_clock_error_p99_ms: the same schedule's arrival thread with no server beside it (the process asleep): the
  operating system's own wake-up latency on this machine, the floor under the server's figure. On cores that other
  processes keep busy it is milliseconds (`load_1m`, the machine's load average, says how busy).

Target: achieved within 2% of offered and arrival error p99 under 1 ms at a sustainable rate. The model is `tiny`
(random weights, each request 16 tokens), continuous batching in 8 slots, one torch thread; each rate serves
REQUESTS requests RUNS times after one warm-up run. The last line is JSON.

    python benchmarks/arrivals.py [RATE ...]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

from tokengen.contract.rules import resolve
from tokengen.contract.slo import Slo
from tokengen.engines import make_generator
from tokengen.engines.arrival_clock import ArrivalClock
from tokengen.engines.request_server import request_lengths
from tokengen.measure.load_figures import load_figures, percentile
from tokengen.models import build_model, eos_ids

RATES = (10.0, 20.0, 40.0)
REQUESTS, RUNS = 216, 2  # 200 measured per run: 8 slots of warm-up and of drain left out


def idle_clock_errors(times: tuple[float, ...]) -> list[float]:
    """Each arrival's registration less its schedule, with the process otherwise asleep."""
    clock = ArrivalClock(times, len(times))
    clock.start(time.perf_counter())
    clock.wait_beyond(len(times) - 1)
    clock.stop()
    return [r - t for r, t in zip(clock.registered_s, times)]


def one_rate(net, rate: float) -> dict:
    spec = resolve(
        "static_cache_continuous",
        model="tiny",
        requests=REQUESTS,
        batch_size=8,
        prompt_len=8,
        max_seqlen=16,
        stop="fixed:16",
        request_rate=rate,
    )
    server = make_generator(net, spec)
    server()  # warm-up
    runs = [server() for _ in range(RUNS)]
    lengths = request_lengths(spec, runs[-1].tokens, eos_ids(net.config)).tolist()
    figures = load_figures(runs, lengths, Slo())
    errors = [r - a for run in runs for r, a in zip(run.registered_s, run.arrivals_s)]
    floor = idle_clock_errors(tuple(runs[-1].arrivals_s))
    return {
        "rate": rate,
        "offered": round(figures["offered_rate_rps"], 3),
        "achieved": round(figures["achieved_rate_rps"], 3),
        "achieved_over_offered": round(figures["achieved_rate_rps"] / figures["offered_rate_rps"], 4),
        "arrival_error_median_ms": round(1e3 * statistics.median(errors), 4),
        "arrival_error_p99_ms": round(1e3 * percentile(errors, 99), 4),
        "arrival_error_max_ms": round(1e3 * max(errors), 4),
        "idle_clock_error_p99_ms": round(1e3 * percentile(floor, 99), 4),
        "queue_p50_ms": round(1e3 * figures["request_queue_p50_s"], 3),
        "ttft_p50_ms": round(1e3 * figures["request_ttft_p50_s"], 3),
        "step_ms": round(1e3 * runs[-1].held_s[-1] / runs[-1].steps, 3),  # the run's wall per forward, idle included
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    torch.set_num_threads(1)
    net = build_model("tiny", "float32", "cpu", seed=0)
    rates = [float(r) for r in sys.argv[1:]] or RATES
    rows = []
    for rate in rates:
        rows.append(one_rate(net, rate))
        print(rows[-1], file=sys.stderr, flush=True)
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
