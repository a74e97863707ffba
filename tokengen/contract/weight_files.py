"""A local checkpoint's safetensors files judged by their headers, without torch: truncated or not one.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON naming each tensor's
byte range (`data_offsets`, from the end of the header), then the tensors, which end exactly at the
last range's end. Reading those 8 + N bytes and the file's size tells a file cut short by a copy, or
bytes that were never a safetensors file, in microseconds; loading it would say the same as a
25-line `SafetensorError` traceback from inside the trial. Judged once per file and version (its
size and mtime), since a grid asks for every point.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

MAX_HEADER_BYTES = 100_000_000  # the safetensors library refuses a larger header
FIX = "save the model again with save_pretrained(), or copy the file again in full"


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with one safetensors file, naming it and the fix; None for a whole one."""
    stat = path.stat()
    return _judged(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _judged(path: str, size: int, mtime_ns: int) -> str | None:
    with open(path, "rb") as handle:
        head = handle.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else 0
        if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
            return (
                f"{path} is not a safetensors file (its first 8 bytes give a {length:,}-byte header in a "
                f"{size:,}-byte file): {FIX}"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw)
        ends = [int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return f"{path} is not a safetensors file (its header is not a table of tensors): {FIX}"
    expected = 8 + length + max(ends, default=0)
    if size < expected:
        return f"{path} is truncated ({size:,} of the {expected:,} bytes its header describes): {FIX}"
    if size > expected:
        return f"{path} has {size - expected:,} bytes after the tensors its header describes: {FIX}"
    return None


def safetensors_metadata(path: Path) -> dict[str, str]:
    """The text a safetensors file carries in its header's `__metadata__` ({} where none, or no header):
    a trained checkpoint's held-out loss, corpus and steps, read without loading a tensor."""
    try:
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if not 2 <= length <= MAX_HEADER_BYTES:
                return {}
            meta = json.loads(handle.read(length)).get("__metadata__")
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}


def weights_problem(directory: Path) -> str | None:
    """The first safetensors file of a checkpoint directory that is truncated or not one, or None."""
    for path in sorted(directory.glob("*.safetensors")):
        problem = safetensors_problem(path)
        if problem:
            return problem
    return None
