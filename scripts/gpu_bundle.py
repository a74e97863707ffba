"""The wheels a sweep needs on the GPU machine beyond its image, as one archive: run where the registry is.

The GPU machine has no network and an image without Ray, MLflow or Hydra (scripts/gpu_image/packages.txt);
files travel to it with the command, 64 MiB in all. So: resolve scripts/gpu_image/sweep_needs.txt at the
versions of constraints.txt for the target Python and platform, build what is published as source only
(antlr4-python3-runtime), leave out every package the image has, strip from Ray what a sweep never loads
(the Java workers, the dashboard's web app), store each wheel uncompressed so that xz compresses the whole
archive at once, and write DIR/gpu_bundle.tar.xz and DIR/manifest.txt. Refuses an archive over 56 MiB. Beside it,
DIR/trained.tar.xz: the trained presets' checkpoints with the held-out text their prompts come from (built here
once by `python -m tokengen.train`), so the GPU measures the same weights on the same prompts as this machine,
whatever its own standard library (scripts/gpu_sweep.sh names them by $TOKENGEN_TRAINED_DIR).

    python scripts/gpu_bundle.py 3.12 .gpu_bundle
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "scripts" / "gpu_image" / "packages.txt"
NEEDS = ROOT / "scripts" / "gpu_image" / "sweep_needs.txt"
ARCHIVE, MANIFEST, TRAINED = "gpu_bundle.tar.xz", "manifest.txt", "trained.tar.xz"
LIMIT_MIB = 56
SOURCE_ONLY = ("antlr4-python3-runtime",)  # no wheel on the registry: built here (pure Python)
NEVER_LOADED = {"ray": ("ray/jars/", "ray/dashboard/client/build/")}
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(path: Path) -> dict[str, str | None]:
    """name -> version (None where unpinned) of a list file: one `name` or `name==version` a line."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            found[normalized(name)] = version or None
    return found


def pins() -> dict[str, str]:
    return {name: version for name, version in listed(ROOT / "constraints.txt").items() if version}


def wheel_name(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return normalized(name), version


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def download(python: str, into: Path, built: Path) -> None:
    constraints = pins()
    wanted = [f"{name}=={constraints[name]}" if name in constraints else name for name in listed(NEEDS)]
    for name in SOURCE_ONLY:
        pip(
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(built),
            next(w for w in wanted if normalized(w.split("==")[0]) == name),
        )
    cpython = "cp" + python.replace(".", "")
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pinned = into.parent / "pins.txt"  # the registry resolves the rest of the tree, held to the same pins
    pinned.write_text("".join(f"{n}=={v}\n" for n, v in constraints.items() if n != "torch"))
    pip(
        "download",
        "-q",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        cpython,
        *platforms,
        "--find-links",
        str(built),
        "-c",
        str(pinned),
        "-d",
        str(into),
        *wanted,
    )


def repack(wheel: Path, into: Path) -> int:
    """The wheel stored (uncompressed) without the paths a sweep never loads, its RECORD to match; its bytes."""
    drop = NEVER_LOADED.get(wheel_name(wheel)[0], ())
    target = into / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as out:
        for info in source.infolist():
            if info.filename.startswith(drop):
                continue
            data = source.read(info)
            if info.filename.endswith(".dist-info/RECORD") and drop:
                lines = [line for line in data.decode().splitlines() if not line.startswith(drop)]
                data = ("\n".join(lines) + "\n").encode()
            entry = zipfile.ZipInfo(info.filename, info.date_time)
            entry.external_attr = info.external_attr  # the mode bits: Ray's gcs_server and raylet are executables
            out.writestr(entry, data, zipfile.ZIP_STORED)
    return target.stat().st_size


def build(python: str, out_dir: Path) -> Path:
    image = listed(IMAGE)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        downloaded, built, stored = Path(tmp, "downloaded"), Path(tmp, "built"), Path(tmp, "wheels")
        for folder in (downloaded, built, stored):
            folder.mkdir()
        download(python, downloaded, built)
        carried, provided = [], []
        for wheel in sorted(downloaded.glob("*.whl")):
            name, version = wheel_name(wheel)
            if name in image:
                provided.append(f"{name}=={version}")
                continue
            carried.append(f"{name}=={version}  {repack(wheel, stored)} bytes stored")
        archive, partial = out_dir / ARCHIVE, out_dir / f"{ARCHIVE}.partial"
        with tarfile.open(partial, "w:xz", preset=6) as tar:
            tar.add(stored, arcname="wheels")
        partial.replace(archive)  # a bundle stopped half-way is never taken for a whole one
        manifest = [
            f"# wheels for CPython {python} on x86_64 Linux, built {archive.name}",
            "[carried]",
            *carried,
            "[provided by the image] (resolved here, left out)",
            *provided,
        ]
        (out_dir / MANIFEST).write_text("\n".join(manifest) + "\n")
    return archive


def carry_trained(out_dir: Path) -> Path:
    """DIR/trained.tar.xz: every trained preset's checkpoint folder under trained/<name>/, built here where missing."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "trained")
        if importlib.util.find_spec("torch") is None:  # a checkpoint is found (and built) by its torch's version too
            raise SystemExit(
                f"gpu_bundle: {sys.executable} has no torch to find or build the trained presets with: run this from "
                "the project's environment (. .venv/bin/activate)"
            )
        subprocess.run([sys.executable, "-m", "tokengen.train", "--out", str(folder)], check=True, cwd=ROOT)
        archive, partial = out_dir / TRAINED, out_dir / f"{TRAINED}.partial"
        with tarfile.open(partial, "w:xz", preset=9) as tar:
            tar.add(folder, arcname="trained")
        partial.replace(archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", help="the target's Python, e.g. 3.12 (the GPU image's)")
    parser.add_argument("dir", type=Path, help="where the archive and its manifest go (git-ignored)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        print(f"gpu_bundle: {args.python!r} is not a Python version: give e.g. 3.12", file=sys.stderr)
        return 2
    archive = build(args.python, args.dir)
    trained = carry_trained(args.dir)
    mib = (archive.stat().st_size + trained.stat().st_size) / 2**20
    if mib > LIMIT_MIB:
        archive.unlink()
        print(
            f"gpu_bundle: the archive is {mib:.1f} MiB, over the {LIMIT_MIB} MiB that may travel with a command: "
            f"carry fewer packages (scripts/gpu_image/sweep_needs.txt)",
            file=sys.stderr,
        )
        return 1
    carried = sum(1 for line in (args.dir / MANIFEST).read_text().splitlines() if "bytes stored" in line)
    print(
        f"gpu_bundle: {archive} and {trained.name}, {mib:.1f} MiB, {carried} wheels (manifest: {args.dir / MANIFEST})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
