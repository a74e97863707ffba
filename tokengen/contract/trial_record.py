"""A trial's record: the spec it ran and the result it measured, as one typed object.

After the trial process, a trial's outcome is a `TrialRecord` everywhere it goes: what Ray's task returns, what a
journal line reads back as, what the outbox keeps, what the recorder takes. Its flat dict (the spec's fields, then
the result's: `to_dict`) is what result.json, a journal line and a run's result.json artifact hold on disk, and
`from_dict` is the one door back: a value not of its field's type is refused there, in one line that names the
field. The trial's files and log travel beside the record (they are bytes and text for people, never fields), and
a compiled-graph offer for the driver's shelf rides back from Ray with it until the scheduler takes it off.
Torch-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tokengen.contract.record import RESULT_FIELDS, TrialResult, unknown_fields
from tokengen.contract.spec import SPEC_FIELDS, TrialSpec, parse_field


@dataclass(frozen=True)
class TrialRecord:
    spec: TrialSpec  # as the sweep planned it (sweeps/execution/trial_process.py: complete_record)
    result: TrialResult
    files: dict[str, bytes] = field(default_factory=dict)  # tokens.npy, a trace, an nsys report: by file name
    log: str = ""  # the trial's log, for people
    compile_offer: bytes | None = None  # compiled graphs for the driver's shelf (sweeps/execution/compile_share.py)

    def __post_init__(self) -> None:
        """A record is made of a TrialSpec and a TrialResult, never of their dicts."""
        for name, kind in (("spec", TrialSpec), ("result", TrialResult)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"TrialRecord.{name}: a {type(value).__name__} where {kind.__name__} is declared")

    @property
    def key(self) -> str | None:
        return self.result.key

    @property
    def status(self) -> str:
        return self.result.status

    def to_dict(self) -> dict:
        """The flat record as result.json and a journal line hold it: the spec's fields, then the result's."""
        return {**self.spec.to_dict(), **self.result.to_dict()}

    @classmethod
    def from_dict(
        cls, flat: dict, files: dict[str, bytes] | None = None, log: str = "", drop_undeclared: bool = False
    ) -> TrialRecord:
        """The record a flat dict holds (to_dict's, a trial's result.json, a journal line, a run read back); a field
        it leaves out takes its default. A name neither the spec nor the result declares is refused in one line, or
        with `drop_undeclared` (what an older journal may hold, a run's other tags) left out; a value not of its
        field's type is refused either way (SpecError for a spec field, TypeError for a result's)."""
        names = unknown_fields(flat)
        if names and not drop_undeclared:
            raise TypeError(f"TrialRecord.from_dict: fields neither the spec nor the result declares: {names}")
        spec = TrialSpec(**{name: parse_field(name, flat[name]) for name in SPEC_FIELDS if name in flat})
        result = TrialResult(**{name: flat[name] for name in RESULT_FIELDS if name in flat})
        return cls(spec, result, dict(files or {}), log)

    def with_result(self, **fields) -> TrialRecord:
        """The same record, these result fields replaced (each checked against its declared type)."""
        return dataclasses.replace(self, result=dataclasses.replace(self.result, **fields))


def make_record(spec: TrialSpec, **result) -> TrialRecord:
    """A trial's record from its spec and its result's fields (TypeError on a name the result does not declare,
    or a value not of its field's type)."""
    return TrialRecord(spec, TrialResult(**result))
