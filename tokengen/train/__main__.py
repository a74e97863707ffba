"""`python -m tokengen.train [NAME ...]`: build the trained presets (and their draft companions) into the cache
folder, once; a second call finds them. `--out DIR` also copies each into DIR/<name>/, the folder another machine
names by $TOKENGEN_TRAINED_DIR (scripts/gpu_bundle.py carries it to the GPU). `--steps` and `--corpus` build the
same recipe shorter or on other text (tests and experiments: another key, never the preset's own checkpoint).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: a waiting thread sleeps, not spins

import argparse  # noqa: E402 - after the variable above
import dataclasses  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from tokengen.contract.trained import RECIPES  # noqa: E402
from tokengen.train import with_companions  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokengen.train", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"one of {', '.join(RECIPES)} (default: tiny-trained)")
    parser.add_argument("--steps", type=int, help="train this many steps instead of the recipe's")
    parser.add_argument("--corpus", type=Path, help="a folder of .py files instead of the standard library")
    parser.add_argument("--out", type=Path, help="also copy each checkpoint to OUT/<name>/")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in RECIPES]
    if unknown:
        parser.error(f"unknown trained preset {unknown[0]!r}: choose one of {', '.join(RECIPES)}")
    from tokengen.train.checkpoints import obtain

    for name in with_companions(args.names or ["tiny-trained"]):
        recipe = RECIPES[name] if args.steps is None else dataclasses.replace(RECIPES[name], steps=args.steps)
        path, built = obtain(name, recipe, args.corpus)
        if built:
            print(
                f"{name}: built in {built['seconds']:.0f} s ({built['cpu_seconds']:.0f} CPU-s), {built['steps']} "
                f"steps, held-out loss {built['heldout_loss']:.3f} nats/byte (unigram {built['unigram_loss']:.3f}), "
                f"median top-1/top-2 margin {built['heldout_margin']:.2f}: {path}",
                file=sys.stderr,
            )
        else:
            print(f"{name}: already built: {path}", file=sys.stderr)
        if args.out:
            target = args.out / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(path, target)
            print(f"{name}: copied to {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
