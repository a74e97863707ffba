"""`python -m tokengen`: one trial from flags built off TrialSpec's fields; table out, JSON on request."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from tokengen.spec import CHOICES, FIELD_TYPES, SpecError, TrialSpec, parse_field

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tokengen",
        description="Run one token-generation trial and print the article-style table.",
    )
    for f in dataclasses.fields(TrialSpec):
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=_typed(f.name),
            default=None,
            metavar=f.name.upper() if f.name not in CHOICES else None,
            choices=CHOICES.get(f.name),
            help=f"default: {getattr(_DEFAULTS, f.name)}" + (" (a preset: sets the four knobs)" if f.name == "variant" else ""),
        )
    parser.add_argument("--json", metavar="PATH", help="write the result record as JSON ('-' for stdout)")
    parser.add_argument("--tokens", metavar="PATH", help="save the generated tokens as an int64 .npy array")
    parser.add_argument("--profile-dir", metavar="DIR", default=".", help="where a profiled run writes its trace")
    parser.add_argument("--list", action="store_true", help="list variants and models, then exit")
    return parser


UNDER_NSYS = "TOKENGEN_UNDER_NSYS"


def run_under_nsys(argv: list[str], profile_dir: Path, json_path: str | None) -> int:
    """Run this same command again under `nsys profile`, then fold the report's metrics into the record."""
    import subprocess

    from tokengen.names import NSYS_REPORT, RESULT_FILE
    from tokengen.profiling import nsys_command, nsys_export_command
    from tokengen.traces import derive, from_nsys_sqlite

    profile_dir.mkdir(parents=True, exist_ok=True)
    record_path = Path(json_path) if json_path and json_path != "-" else profile_dir / RESULT_FILE
    inner = [sys.executable, "-m", "tokengen", *strip_option(argv, "--json"), "--json", str(record_path)]
    report = profile_dir / NSYS_REPORT
    report.with_suffix(".nsys-rep").unlink(missing_ok=True)
    # nsys and the inner trial print to stderr: stdout stays the JSON's alone with --json -
    proc = subprocess.run(nsys_command(inner, report), env={**os.environ, UNDER_NSYS: "1"}, stdout=sys.stderr)
    if proc.returncode != 0:
        return proc.returncode
    record = json.loads(record_path.read_text())
    rep = report.with_suffix(".nsys-rep")
    if rep.is_file():  # no report when the batch ended before the capture window
        sqlite_path = profile_dir / f"{NSYS_REPORT}.sqlite"
        subprocess.run(nsys_export_command(rep, sqlite_path), check=True, capture_output=True)
        record.update(derive(from_nsys_sqlite(sqlite_path)), profile_report=rep.name)
    record_path.write_text(json.dumps(record, indent=2))
    if json_path == "-":
        print(json.dumps(record))
    return 0


def strip_option(argv: list[str], option: str) -> list[str]:
    """argv without `option VALUE` or `option=VALUE`."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    json_path, tokens_path, listing = args.pop("json"), args.pop("tokens"), args.pop("list")
    profile_dir = args.pop("profile_dir")
    if listing:
        from tokengen import models, presets

        print("variants:", ", ".join(presets.PRESETS))
        print("models:  ", ", ".join(models.PRESETS), "or a local directory")
        return 0
    from tokengen.profiling import resolve_mode
    from tokengen.validate import check_runnable, resolve

    try:
        spec = resolve(**args)
        check_runnable(spec)
        for path in (json_path, tokens_path):
            if path and path != "-" and not Path(path).resolve().parent.is_dir():
                raise SpecError(f"cannot write {path}: its directory does not exist")
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = dataclasses.replace(spec, profile=resolve_mode(spec.profile, spec.device))  # auto, on this machine

    if spec.profile == "nsys" and os.environ.get(UNDER_NSYS) != "1":
        return run_under_nsys(list(sys.argv[1:] if argv is None else argv), Path(profile_dir), json_path)

    from tokengen.benchmark import run_trial
    from tokengen.table import render

    record = run_trial(spec, tokens_path, profile_dir)
    print(render(record), file=sys.stderr if json_path == "-" else sys.stdout)
    if json_path == "-":
        print(json.dumps(record))
    elif json_path:
        Path(json_path).write_text(json.dumps(record, indent=2))
    return 0
