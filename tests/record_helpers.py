"""A result record with every field filled, for the tests that write one through the Recorder."""

from __future__ import annotations

from tokengen.contract.names import FINISHED
from tokengen.contract.record import METRIC, TAG, base_type, with_role
from tokengen.contract.spec import TrialSpec
from tokengen.contract.trial_record import TrialRecord, make_record


def full_record() -> TrialRecord:
    """A record with a value in every field MLflow stores, each of its declared type."""
    spec = TrialSpec(model="tiny", batch_size=3, max_seqlen=7, prompt_len=4, matmul_precision="high", cache="static")
    values = {}
    for name in with_role(METRIC) + with_role(TAG):
        if name in ("key", "status"):
            continue
        kind = base_type(name)
        values[name] = {int: 7, float: 0.25, bool: True, str: f"text-{name}"}[kind]
    return make_record(
        spec, key=spec.key(), status=FINISHED, accelerator_type="H200", runtime_s=[0.3, 0.2, 0.25], **values
    )
