"""transformers' continuous batching (paged attention) as the request workloads' peer (engine=generate_batch)."""

from __future__ import annotations

import inspect
import sys
import time
from typing import Callable

import torch
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from tokengen.contract.arrivals import schedule_for
from tokengen.contract.forms import parse_stop
from tokengen.contract.spec import TrialSpec
from tokengen.decode.prompts import prompt_ids
from tokengen.decode.ranges import NO_RANGES, NoRanges
from tokengen.decode.stopping import target_lengths
from tokengen.engines.arrival_clock import SWITCH_S
from tokengen.engines.request_server import Served
from tokengen.models import eos_ids

PAGE_KWARG = "page_size" if "page_size" in inspect.signature(ContinuousBatchingConfig).parameters else "block_size"
"""Tokens per KV page: ContinuousBatchingConfig's `page_size` from transformers 5.18 (`block_size` a deprecated
alias), `block_size` up to 5.17."""


class GenerateBatchEngine:
    """transformers' continuous batching (paged attention) on the trial's requests, greedy: the
    manager that `model.generate_batch()` runs (its context manager, then add_request per request and
    get_result until all are finished), used directly because generate_batch() takes one
    max_new_tokens for all requests while the manager's add_request takes one per request.

    A drawn length L runs L tokens (max_new_tokens=L, no EOS) and its last one is replaced by EOS, as
    the device-forced EOS of our loop and of the generate() peers reads: the same forwards, the same
    tokens. stop=model ends at the model's EOS ids, else at max_seqlen; stop=never at max_seqlen.
    Up to batch_size requests decode together (`max_requests_per_batch`), FIFO in request order
    (block sharing off: it would reorder requests), a batch of prompts fits one forward; the paged
    cache is sized for batch_size requests of P + max_seqlen tokens. The manager, its cache and its
    warmup persist across the trial's runs, so a run pays what a generate_batch() call does from a
    warm model: the loop thread's start, and its stop (which joins the thread and runs gc.collect()).
    A request's latency is the time its result arrived; `steps` are the loop's forwards.

    Under arrivals (request_rate) each request is added when its scheduled time comes, open loop: the manager's
    add_request admits requests while its loop runs, and results are taken while the next arrival is awaited. Each
    request's tokens carry the manager's own timestamps (record_timestamps: the host clock, as its loop appended each
    token), from which its TTFT, TPOT and ITL are read as ours are (tokengen/measure/load_figures.py); the wait
    before its prefill is the manager's own and is not measured (no queueing delay).
    """

    PAGE = 16  # tokens per page: small pages waste little on short requests
    PROFILE_SKIPPED = (
        "engine=generate_batch runs its forwards on a thread of its own, outside the trial's "
        "step ranges: it has no per-step profile"
    )

    def __init__(self, model: torch.nn.Module, spec: TrialSpec):
        self.model, self.spec = model, spec
        count, prompt_len, slots = spec.requests, spec.prompt_len, spec.batch_size
        self.prompts = prompt_ids(
            model.config, count, prompt_len, spec.seed, max_seqlen=spec.max_seqlen
        ).tolist()  # N lists of P ids
        targets = target_lengths(spec.stop, count, spec.max_seqlen, spec.seed)
        self.lengths = targets.tolist() if targets is not None else None  # None: ended by EOS or max_seqlen
        eos = eos_ids(model.config)
        self.pad = eos[0] if eos else 0
        self.eos = eos if parse_stop(spec.stop)[0] == "model" else -1  # -1: no EOS stops a request
        self.generation = GenerationConfig(
            do_sample=False, max_new_tokens=spec.max_seqlen, eos_token_id=self.eos, pad_token_id=self.pad
        )
        pages = -(-(prompt_len + spec.max_seqlen) // self.PAGE)  # per request, rounded up
        self.batching = ContinuousBatchingConfig(
            **{PAGE_KWARG: self.PAGE},
            num_blocks=slots * pages + slots,
            max_requests_per_batch=slots,
            max_batch_tokens=slots * prompt_len + slots,
            allow_block_sharing=False,
            seed=spec.seed,
        )
        model.destroy_cached_continuous_batching_manager()  # an earlier trial's, sized for its workload
        schedule = schedule_for(spec)  # None offline; a trace is refused by the rules (one prompt length here)
        self.arrivals = list(schedule.times_s) if schedule is not None else None
        self.warm = False

    def _results(self, manager, start: float) -> tuple[dict, dict, list[float]]:
        """Every request added (each at its arrival under a schedule, results taken while waiting for it), then
        every result: (request -> result, request -> when the host had it, when each request was added)."""
        ids, results, arrived, registered = {}, {}, {}, []

        def take(timeout: float) -> None:
            result = manager.get_result(timeout=timeout)
            if result is not None and result.is_finished():
                results[ids[result.request_id]] = result
                arrived[ids[result.request_id]] = time.perf_counter() - start
            elif result is None and not manager.is_running():
                raise RuntimeError("transformers' continuous batching loop stopped before every request finished")

        for i, prompt in enumerate(self.prompts):
            if self.arrivals is not None:
                due = start + self.arrivals[i]
                while (now := time.perf_counter()) < due:
                    take(due - now)
            registered.append(time.perf_counter() - start)
            budget = self.lengths[i] if self.lengths else self.spec.max_seqlen
            added = manager.add_request(prompt, max_new_tokens=budget, eos_token_id=self.eos, record_timestamps=True)
            ids[added] = i
        while len(results) < len(ids):
            take(1)
        failed = [r.error for r in results.values() if r.error]
        if failed:
            raise RuntimeError(f"transformers' continuous batching failed a request: {failed[0]}")
        return results, arrived, registered

    def _tokens(self, results: dict) -> torch.Tensor:
        """(N, P + max_seqlen): prompt, the request's tokens (a drawn length's last one EOS), then padding."""
        spec = self.spec
        tokens = torch.full((len(self.prompts), spec.prompt_len + spec.max_seqlen), self.pad, dtype=torch.long)
        tokens[:, : spec.prompt_len] = torch.tensor(self.prompts)
        for i, result in results.items():
            said = list(result.generated_tokens)[: spec.max_seqlen]
            if self.lengths:
                said = said[: self.lengths[i] - 1] + [self.pad]
            tokens[i, spec.prompt_len : spec.prompt_len + len(said)] = torch.tensor(said, dtype=torch.long)
        return tokens

    def _marks(self, wrap_step: Callable | None):
        """A step timer's marks: one at the call, then one as each forward after the first begins, so
        step 0 is the call's time to its first token and every later step one of the loop's forwards.
        Under CUDA graphs the loop's replays skip module hooks: then step 0 is the whole run."""
        if not wrap_step:
            return None
        mark, forwards = wrap_step(lambda i: None), []
        mark(0)

        def forward_begins(*_) -> None:  # a pre-hook that returned a value would replace the inputs
            forwards.append(1)
            if len(forwards) > 1:
                mark(len(forwards))

        return self.model.register_forward_pre_hook(forward_begins)

    @torch.no_grad()
    def __call__(self, wrap_step: Callable | None = None, ranges: NoRanges = NO_RANGES) -> Served:
        """Serve every request once; `wrap_step` lets a step timer see the loop's forwards (see _marks)."""
        start = time.perf_counter()
        hook = self._marks(wrap_step)
        switch = sys.getswitchinterval()
        if self.arrivals is not None:  # the manager's thread holds the GIL between forwards: an arrival waits less
            sys.setswitchinterval(min(SWITCH_S, switch))
        try:
            with self.model.continuous_batching_context_manager(
                generation_config=self.generation,
                continuous_batching_config=self.batching,
                block=True,
                persistent_manager=True,
                warmup=not self.warm,
            ) as manager:
                results, arrived, registered = self._results(manager, start)
        finally:
            sys.setswitchinterval(switch)
            if hook:
                hook.remove()
        self.warm = True
        count = len(self.prompts)
        return Served(
            tokens=self._tokens(results),
            steps=manager.current_batch,
            prompt_len=self.spec.prompt_len,
            latencies_s=[arrived[i] for i in range(count)],
            slots=self.spec.batch_size,
            arrivals_s=list(self.arrivals) if self.arrivals is not None else [0.0] * count,
            registered_s=registered,
            token_times_s=[[t - start for t in results[i].timestamps or []] for i in range(count)],
        )
