"""`python -m tokengen`: one trial from flags built off TrialSpec's fields; table out, JSON on request."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from pathlib import Path

from tokengen.contract.spec import CHOICES, FIELD_TYPES, SpecError, TrialSpec, parse_field
from tokengen.writable import unwritable

_DEFAULTS = TrialSpec()


def _typed(name: str):
    """argparse's converter for a spec field: the spec's own parser, its message as argparse's."""

    def convert(text: str):
        try:
            return parse_field(name, text)
        except SpecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = FIELD_TYPES[name].__name__
    return convert


class OneLineParser(argparse.ArgumentParser):
    """argparse answers one mistyped flag with its whole usage (23 lines) before the reason; here the reason
    alone, in one line that names the flag and the fix, exit 2 as for any bad input."""

    def error(self, message: str):
        print(f"error: {usage_error(message, self.prog)}", file=sys.stderr)
        self.exit(2)


def usage_error(message: str, prog: str = "python -m tokengen") -> str:
    """argparse's message as one line: `--quant int9: choose one of none, int8, int4`, else the message and where
    `prog` lists its flags."""
    choice = re.fullmatch(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)", message)
    if choice:
        flag, value, options = choice.groups()
        return f"{flag} {value}: choose one of {options.replace(chr(39), '')}"
    return f"{message.removeprefix('argument ')}: see {prog} --help"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m tokengen", description="Run one token-generation trial and print the article-style table."
    )
    for f in dataclasses.fields(TrialSpec):
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=_typed(f.name),
            default=None,
            metavar=f.name.upper() if f.name not in CHOICES else None,
            choices=CHOICES.get(f.name),
            help=f"default: {getattr(_DEFAULTS, f.name)}"
            + (" (a preset: sets the four knobs)" if f.name == "variant" else ""),
        )
    parser.add_argument("--json", metavar="PATH", help="write the result record as JSON ('-' for stdout)")
    parser.add_argument(
        "--tokens", metavar="PATH", help="save the generated tokens as an int64 .npy array, at PATH as given"
    )
    parser.add_argument("--profile-dir", metavar="DIR", default=".", help="where a profiled run writes its trace")
    parser.add_argument(
        "--memory-guard",
        type=float,
        default=0.9,
        metavar="FRACTION",
        help="refuse a trial estimated past this fraction of the free memory, as a sweep's "
        "sweep.memory_guard does (0: off; default: %(default)s)",
    )
    parser.add_argument("--list", action="store_true", help="list variants and models, then exit")
    return parser


def memory_refusal(spec: TrialSpec, guard: float) -> str | None:
    """The contract's estimate and guard (tokengen/contract/memory_estimate.py, torch-free), the ones a sweep asks,
    before a model is built: a trial that would not fit is one line, not minutes of work and a traceback."""
    from types import SimpleNamespace

    from tokengen.contract.memory_estimate import free_memory
    from tokengen.contract.memory_estimate import memory_refusal as refusal

    return refusal(
        [SimpleNamespace(spec=spec, key=spec.key())],
        free_memory(),
        guard or None,
        setting="--memory-guard ",
        fix="lower --batch-size, or pass --memory-guard 0 to run it anyway",
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    json_path, tokens_path, listing = args.pop("json"), args.pop("tokens"), args.pop("list")
    profile_dir, guard = args.pop("profile_dir"), args.pop("memory_guard")
    if listing:
        from tokengen.contract.model_facts import PRESET_FACTS
        from tokengen.contract.variants import VARIANTS

        print("variants:", ", ".join(VARIANTS))
        print("models:  ", ", ".join(PRESET_FACTS), "or a local directory")
        return 0
    from tokengen.contract.rules import check_runnable, resolve
    from tokengen.measure.profiler.window import resolve_mode

    try:
        spec = resolve(**args)
        check_runnable(spec)
        refusal = memory_refusal(spec, guard)
        if refusal:
            raise SpecError(refusal)
        if tokens_path == "-":
            raise SpecError("--tokens -: the tokens are a binary .npy array, not for standard output: give a file path")
        for flag, path in (("--json", json_path), ("--tokens", tokens_path)):
            if path and path != "-" and not Path(path).resolve().parent.is_dir():
                raise SpecError(f"cannot write {path}: its directory does not exist")
            why = path and path != "-" and unwritable(path)  # the very path written: run_trial adds no suffix
            if why:
                raise SpecError(f"cannot write {flag} {path}: {why}: give another path")
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = dataclasses.replace(spec, profile=resolve_mode(spec.profile, spec.device))  # auto, on this machine

    from tokengen.measure.profiler.nsys import UNDER_NSYS, run_under_nsys

    if spec.profile == "nsys" and os.environ.get(UNDER_NSYS) != "1":
        return run_under_nsys(list(sys.argv[1:] if argv is None else argv), Path(profile_dir), json_path, spec.device)

    from tokengen.measure.trial import run_trial
    from tokengen.terminal_table import render

    try:
        record = run_trial(spec, tokens_path, profile_dir)
    except SpecError as exc:  # what only building the model finds (a .bin torch refuses)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(record), file=sys.stderr if json_path == "-" else sys.stdout)
    if json_path == "-":
        print(json.dumps(record))
    elif json_path:
        Path(json_path).write_text(json.dumps(record, indent=2))
    return 0
