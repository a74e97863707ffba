"""`python -m tokengen`: one trial from flags built off TrialSpec's fields; table out, JSON on request."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from tokengen.spec import CHOICES, FIELD_TYPES, SpecError, TrialSpec

_DEFAULTS = TrialSpec()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tokengen",
        description="Run one token-generation trial and print the article-style table.",
    )
    for f in dataclasses.fields(TrialSpec):
        kind = int if FIELD_TYPES[f.name] == "int" else str
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=kind,
            default=None,
            metavar=f.name.upper() if f.name not in CHOICES else None,
            choices=CHOICES.get(f.name),
            help=f"default: {getattr(_DEFAULTS, f.name)}" + (" (a preset: sets the four knobs)" if f.name == "variant" else ""),
        )
    parser.add_argument("--json", metavar="PATH", help="write the result record as JSON ('-' for stdout)")
    parser.add_argument("--tokens", metavar="PATH", help="save the generated tokens as an int64 .npy array")
    parser.add_argument("--list", action="store_true", help="list variants and models, then exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    json_path, tokens_path, listing = args.pop("json"), args.pop("tokens"), args.pop("list")
    if listing:
        from tokengen import models, presets

        print("variants:", ", ".join(presets.PRESETS))
        print("models:  ", ", ".join(models.PRESETS), "or a local directory")
        return 0
    from tokengen.validate import check_runnable, resolve

    try:
        spec = resolve(**args)
        check_runnable(spec)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from tokengen.benchmark import run_trial
    from tokengen.table import render

    record = run_trial(spec, tokens_path)
    print(render(record), file=sys.stderr if json_path == "-" else sys.stdout)
    if json_path == "-":
        print(json.dumps(record))
    elif json_path:
        Path(json_path).write_text(json.dumps(record, indent=2))
    return 0
