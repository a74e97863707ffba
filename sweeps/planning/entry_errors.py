"""The sweep's command line checked before `hydra.main` sees it: Hydra's own errors as one line, exit 2.

Hydra reports a mistyped key, a value of the wrong type, an unknown grid or an override it cannot
parse in 5 to 15 lines and exits 1, which this project's exit codes keep for "a trial failed"; and it
writes every override, a URI's password included, into its run folder (`.hydra/config.yaml`,
`hydra.yaml`, `overrides.yaml`) before the sweep's own checks run. So `refuse_bad_command_line`
composes the config once itself, as `hydra.main` will (same directory, same overrides), and turns
each failure into one line that names the key and the fix; a URI carrying a password (or a server URI
carrying a user) is refused here too, before anything is written or printed. A command line that composes goes on to
`hydra.main` untouched, and Hydra's own modes (`--help`, `--multirun`, `--config-dir`, ...) are left
to Hydra.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

from sweeps.planning.config import load_config

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
CONFIG_NAME = "config"
GROUPS = ("trial", "sweep", "ray", "tracking", "grid")  # conf/config.yaml's top-level keys
AXIS_KEYS = ("exclude", "blocks")  # a grid's keys that are not trial fields (sweeps/planning/grid.py)
# a URI with a user or a query, where a secret may hide (any scheme: postgresql too); tracking.store.credentials judges
URI_WITH_SECRET = re.compile(r"\b([a-z][a-z0-9+.-]*)://(?:[^/\s@]*@|[^\s?]*\?)", re.IGNORECASE)
TYPE_WORDS = {"Integer": ("a whole number", 1), "Float": ("a number", 0.5), "bool": ("true or false", "true")}


def refuse_bad_command_line(argv: list[str] | None = None) -> None:
    """Exit 2 with one line on stderr if Hydra would refuse the command line (or a URI on it carries a
    password); return quietly otherwise."""
    line = command_line_problem(sys.argv[1:] if argv is None else argv)
    if line:
        print(f"error: {line}", file=sys.stderr, flush=True)
        sys.exit(2)


def command_line_problem(argv: list[str]) -> str | None:
    """The one line (without `error: `) for a command line Hydra would refuse, or None."""
    from hydra._internal.utils import get_args_parser

    args, unknown = get_args_parser().parse_known_args(argv)
    if unknown or args.help or args.hydra_help or args.shell_completion or args.info:
        return None  # Hydra's own flags and usage errors: Hydra's behaviour
    for override in args.overrides:
        problem = _credentials_problem(override)
        if problem:
            return problem
    if args.multirun or args.config_path or args.config_name or args.experimental_rerun:
        return None  # sweep overrides and other config sources compose differently: left to Hydra
    extra = [f"hydra.searchpath=[file://{Path(args.config_dir).resolve()}]"] if args.config_dir else []
    try:
        config = compose(args.overrides + extra)  # --config-dir: its grids found as Hydra finds them
    except Exception as exc:  # noqa: BLE001 - whatever Hydra or OmegaConf refuses is said in one line
        return explain(exc)
    typed = load_config(config)
    uri = typed.tracking.uri
    problem = _credentials_problem(f"tracking.uri={uri}") if isinstance(uri, str) else None
    problem = problem or _overridden_problem(args.overrides, typed)
    return problem or (None if args.cfg else _run_dir_problem(args.overrides))


def _overridden_problem(overrides: list[str], config) -> str | None:
    """A `trial.X=` on the command line that a grid axis or a point's variant overrides: the user's own setting,
    never silently dropped (sweeps/planning/grid.py judges; only here is it known to be the user's, not a grid
    file's). A grid the planner will refuse is left to it."""
    from sweeps.planning.grid import overridden_setting
    from tokengen.contract.spec import SpecError

    keys = (override.split("=", 1)[0].lstrip("+~") for override in overrides)
    given = [key.split(".", 1)[1] for key in keys if key.startswith("trial.")]
    try:
        return overridden_setting(config.trial, config.grid, given) if given else None
    except SpecError:
        return None


def _run_dir_problem(overrides: list[str]) -> str | None:
    """Hydra writes its run folder (hydra.run.dir, under the working directory by default) before the sweep
    starts: one that cannot be written is said here, not as Hydra's traceback."""
    from tokengen.writable import unwritable

    given = [o.split("=", 1)[1] for o in overrides if o.startswith("hydra.run.dir=")]
    run_dir = given[-1] if given else "outputs"
    why = unwritable(run_dir.split("${", 1)[0] or ".", folder=True)
    if why:
        fix = "give a writable hydra.run.dir=DIR" if given else "run the sweep from a writable directory"
        return f"cannot write Hydra's run folder {run_dir}: {why}: {fix}"
    return None


def compose(overrides: list[str]) -> dict:
    """The config as `hydra.main` composes it (the schema registered by sweeps.planning.config), resolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from sweeps.planning.config import register

    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        config = hydra_compose(CONFIG_NAME, overrides=overrides)
    return OmegaConf.to_container(config, resolve=True)


def _credentials_problem(override: str) -> str | None:
    """A URI with a secret (or a server URI with a user) in an override: refused, named without them."""
    key, _, value = override.partition("=")
    if not URI_WITH_SECRET.search(value):
        return None
    from tracking.store.connect import TrackingError, check_credentials

    key = key.lstrip("+~")
    try:
        check_credentials(value[URI_WITH_SECRET.search(value).start() :], f"{key}=")
    except TrackingError as exc:
        return str(exc)
    return None  # a database user without a password: its driver finds the password itself


def explain(exc: BaseException) -> str:
    """One line that names the key and the fix, for each error Hydra's composition raises."""
    import yaml
    from hydra.errors import MissingConfigException, OverrideParseException

    cause = exc.__cause__ or exc
    if isinstance(cause, yaml.MarkedYAMLError) and cause.problem_mark is not None:
        mark = cause.problem_mark
        return (
            f"{mark.name} is not valid YAML (line {mark.line + 1}, column {mark.column + 1}: {cause.problem}): "
            "fix the file"
        )
    if isinstance(exc, OverrideParseException):
        return _unparsable(exc.override, str(exc))
    if isinstance(exc, MissingConfigException) and "/" in (exc.missing_cfg_file or ""):
        group, name = exc.missing_cfg_file.rsplit("/", 1)
        options = ", ".join(exc.options or [])
        if not (CONF_DIR / group).is_dir():  # one of Hydra's own groups (hydra/job_logging)
            return f"{group}={name}: no {group} named {name!r}: use one of {options}"
        return (
            f"+{group}={name}: no {group} named {name!r}: use one of {options} (conf/{group}/), or add "
            f"{name}.yaml there"
        )
    full_key = getattr(cause, "full_key", None)
    if full_key and _is_unknown_key(cause):
        return _unknown_key(full_key, cause)
    if full_key and getattr(cause, "value", None) is not None:
        return _wrong_value(full_key, cause)
    twice = re.match(r"Multiple values for (\w+)\.", str(exc))
    if twice:
        return f"+{twice[1]}= is given more than once: keep one +{twice[1]}=NAME"
    return _collapsed(str(exc))


def _is_unknown_key(cause: BaseException) -> bool:
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    return isinstance(cause, (ConfigAttributeError, ConfigKeyError))


def _unknown_key(full_key: str, cause: BaseException) -> str:
    """`trial.bogus`, `grid.batchsize`, `sweep.nmae`: what the key could have been, and how to add an axis."""
    from sweeps.planning.grid import TRIAL_FIELDS

    *parents, key = full_key.split(".")
    parent = ".".join(parents)
    if parent == "grid":
        if key in TRIAL_FIELDS:
            return (
                f"grid.{key} is not an axis of this grid: add it with +grid.{key}=[...] (a + appends a key "
                "the config does not have)"
            )
        return f"grid axis {key!r} is not a trial field: " + _choices(key, sorted(TRIAL_FIELDS) + list(AXIS_KEYS))
    known = list(getattr(cause, "parent_node", None) or []) if parents else list(GROUPS)
    what = {
        "trial": "a trial field",
        "sweep": "a sweep setting",
        "ray": "a ray setting",
        "tracking": "a tracking setting",
    }.get(parent, "a key of the config")
    return f"{full_key} is not {what}: " + _choices(key, [k for k in known if k != "hydra"], parent)


def _choices(key: str, known: list[str], parent: str = "") -> str:
    prefix = f"{parent}." if parent else ""
    close = difflib.get_close_matches(key, known, n=1)
    listed = f"use one of {', '.join(known)}"
    return f"did you mean {prefix}{close[0]}? ({listed})" if close else listed


def _wrong_value(full_key: str, cause: BaseException) -> str:
    """`trial.batch_size=abc`, `sweep.resume=maybe`, `sweep=foo`: the type wanted, with an example."""
    message, value = str(cause).splitlines()[0], cause.value
    parent = getattr(cause, "parent_node", None)
    if "is not a subclass of" in message:
        sample = next(iter(parent.get(full_key) or {}), "KEY") if hasattr(parent, "get") else "KEY"
        return (
            f"{full_key}={value!r}: {full_key} is a group of settings, not a value: set one of them, e.g. "
            f"{full_key}.{sample}=..."
        )
    for word, (wanted, sample) in TYPE_WORDS.items():
        if word in message:
            current = parent.get(full_key.rsplit(".", 1)[-1]) if hasattr(parent, "get") else None
            example = sample if current is None or isinstance(current, (list, dict)) else current
            if isinstance(example, bool):
                example = str(example).lower()
            return f"{full_key}={value!r}: give {wanted}, e.g. {full_key}={example}"
    return f"{full_key}={value!r}: {message}: fix the value"


def _unparsable(override: str, message: str) -> str:
    """An override Hydra's grammar cannot read: a character outside it (`sweep.name=smöke`: quote the
    value), or a bracket or quote left open (`grid.batch_size=[1,2`: Hydra's reason)."""
    key, sep, value = override.partition("=")
    lines = message.splitlines()
    if not sep:
        return f"cannot read the override {override!r}: write it as KEY=VALUE, e.g. trial.batch_size=8"
    if lines[0].startswith("LexerNoViableAltException") and len(lines) > 1 and "^" in lines[1]:
        column = lines[1].index("^") - (len(lines[0]) - len(override))
        where = f" at {override[column]!r} (character {column + 1})" if 0 <= column < len(override) else ""
        quoted = value.replace("'", "\\'")
        return (
            f"cannot read the override {override}{where}: Hydra's override grammar reads unquoted "
            f"only ASCII letters, digits and _-./: ; quote any other value: {key}='{quoted}' (in a shell: "
            f"\"{key}='{quoted}'\")"
        )
    reason = next((line for line in lines if line and not line.startswith(("Error parsing", "See https"))), "")
    return (
        f"cannot read the override {override} ({reason}): close its brackets and quotes, e.g. "
        f"{key}=[1,2] or {key}='text'"
    )


def _collapsed(message: str) -> str:
    """Hydra's several lines as one, without its pointers to stack traces and search paths."""
    kept = []
    for line in message.splitlines():
        if line.startswith(("Config search path", "\tprovider=", "Set the environment variable HYDRA_FULL_ERROR")):
            continue
        if line.strip():
            kept.append(line.strip())
    return " ".join(kept) or "Hydra could not compose the config: see python -m sweeps.run --help"
