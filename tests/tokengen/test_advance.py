"""How a generation advances is asked of the declarations (tokengen/decode/advance.py): a LOOP knob declared with
`advances=True` plugs a new advance into the batch loop and the request server with no line written in either, and
the trial's figures count the tokens it produced.

The plug-in case runs in a process of its own (TrialSpec takes its knob fields from the declarations when it is
first imported): it declares a knob `stride` whose values are tests/advance_probes.py's advances, and holds them to
the one-token loop's exact tokens. The lane's `append` is held here to what `keep` does one token at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tokengen.decode.loop import Generation
from tokengen.decode.rows import BatchRows
from tokengen.decode.stopping import StopPolicy
from tokengen.engines.request_server import Served

ROOT = Path(__file__).resolve().parents[2]
ROWS, P, LIMIT, EOS = 5, 3, 12, [7, 9]


def _lane(stop: str) -> BatchRows:
    tokens = torch.full((ROWS, P + LIMIT), -5)  # what no step writes: a column left unwritten shows
    tokens[:, :P] = 1
    policy = StopPolicy.build(stop, EOS, ROWS, LIMIT, seed=3, device="cpu")
    finished = torch.zeros(ROWS, dtype=torch.bool)
    return BatchRows(tokens, finished, None, policy, None, None, None, P)


@pytest.mark.parametrize("stop", ["model", "uniform:1-12", "fixed:4", "never"])
def test_appending_runs_of_any_length_ends_and_pads_each_row_where_keeping_one_at_a_time_does(stop):
    """Rows take runs of 0 to 3 tokens each (a row may take none), from a stream holding EOS ids: each row ends,
    pads and stops at max_seqlen exactly as the one-token loop's rows do, and its length is where it ended."""
    generator = torch.Generator().manual_seed(11)
    stream = torch.randint(0, 12, (ROWS, LIMIT), generator=generator)  # ids 7 and 9 are EOS
    kept, ends = _lane(stop), torch.full((ROWS,), LIMIT)
    for i in range(LIMIT):
        kept.keep(stream[:, i], i)
        ends = torch.where(kept.finished & (ends == LIMIT), torch.minimum(ends, torch.tensor(i + 1)), ends)
    appended = _lane(stop)
    for _ in range(4 * LIMIT):
        counts = torch.randint(0, 4, (ROWS,), generator=generator)  # (R,)
        at = (appended.lengths if appended.lengths is not None else torch.zeros(ROWS, dtype=torch.long))[:, None]
        run = stream.gather(1, (at + torch.arange(3)).clamp(max=LIMIT - 1))  # (R, 3): each row's next tokens
        appended.append(run, counts)
    assert torch.equal(appended.tokens, kept.tokens), (appended.tokens, kept.tokens)
    assert bool(appended.finished.all()) and torch.equal(appended.lengths, ends)  # each row as long as its end


def test_a_generation_says_what_it_produced():
    tokens = torch.zeros((3, 2 + 5), dtype=torch.long)
    assert Generation(tokens=tokens, steps=5, prompt_len=2).produced == 15  # one token per row per step
    assert Generation(tokens=tokens, steps=3, prompt_len=2, produced=15).produced == 15  # an advance's own count
    assert Served(tokens=tokens, steps=4, prompt_len=2, slots=2).produced == 8  # slot-steps


SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, "tests")
    from tokengen.contract import declarations as d

    d.declare(d.Knob("stride", d.LOOP, d.PLAIN, graph=False, advances=True, doc="tokens per advance"),
              d.Declared("stride", "one", None, doc="one token per forward"),
              d.Declared("stride", "two", "advance_probes:TwoAtOnce", preset="two", not_with_requests=True,
                         doc="two one-token forwards per advance, appended as one run"),
              d.Declared("stride", "counted", "advance_probes:Counted", preset="counted", doc="OneToken, counted"))

    import torch
    import advance_probes
    from tokengen.contract.rules import problem, resolve
    from tokengen.engines import make_generator
    from tokengen.measure.trial import run_trial
    from tokengen.models import build_model

    torch.set_num_threads(1)
    model, seen = build_model("tiny", "float32", "cpu", seed=0), {"batch": {}}
    for cache in ("dynamic", "static"):
        for check in ("sync", "every_k", "none"):
            for stop, sampling in (("uniform:2-9", "greedy"), ("never", "topk:20,0.8")):
                point = dict(model="tiny", cache=cache, stop_check=check, stop=stop, sampling=sampling,
                             batch_size=3, prompt_len=4, max_seqlen=9)
                one = make_generator(model, resolve(None, **point))()
                two = make_generator(model, resolve(None, stride="two", **point))()
                seen["batch"][f"{cache} {check} {stop}"] = [
                    torch.equal(one.tokens, two.tokens), one.steps, two.steps, one.produced, two.produced,
                    one.counts.forwards, two.counts.forwards]
    point = dict(model="tiny", cache="static", batching="continuous", requests=5, batch_size=2, prompt_len=4,
                 max_seqlen=9, stop="uniform:1-9")
    plain = make_generator(model, resolve(None, **point))()
    counted = make_generator(model, resolve(None, stride="counted", **point))()
    seen["served"] = [torch.equal(plain.tokens, counted.tokens), advance_probes.Counted.calls, counted.steps]
    seen["refused"] = problem(resolve(None, stride="two", **point))
    trial = dict(model="tiny", cache="dynamic", stop="never", batch_size=2, max_seqlen=8, runs=2, warmup=1)
    seen["trials"] = [[r["steps"], r["tokens_generated"], r["tokens_per_s"] * r["runtime_median_s"]]
                      for r in (run_trial(resolve(None, **trial)), run_trial(resolve(None, stride="two", **trial)))]
    print(json.dumps(seen))
""")


def test_a_loop_knob_declared_to_advance_plugs_into_the_loop_the_server_and_the_figures():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for point, (same, steps, halved, produced, produced_two, forwards, forwards_two) in seen["batch"].items():
        assert same, f"{point}: two tokens per advance must give the one-token loop's tokens"
        assert produced == produced_two and forwards_two <= forwards, point  # the same tokens, no more forwards
        if "none" in point:
            assert (steps, produced) == (9, 3 * 9), point  # a check that never asks runs max_seqlen, padded
        else:
            assert halved == -(-steps // 2) and produced == 3 * steps, point  # half the advances, every token
    same, calls, forwards = seen["served"]
    assert same and calls == forwards  # the server's every step is its declared advance's
    assert seen["refused"] == "stride=two runs one batch: use stride=one for requests, or requests=0"
    (steps, generated, rate_x_median), (steps_two, generated_two, rate_x_median_two) = seen["trials"]
    assert (steps, generated) == (8, 16) and (steps_two, generated_two) == (4, 16)  # tokens produced, not B x steps
    assert rate_x_median == pytest.approx(16) and rate_x_median_two == pytest.approx(16)
