"""The training text: the standard library's .py files as documents of bytes, each ended by the end-of-document id.

A document is one top-level block of a module: a `def` or `class` with its decorators and body, or the module's
text between two of them (imports, constants, comments), its blank lines at either end dropped and one newline
kept. So a model that learns where a block ends says the end-of-document id there, and `stop=model` ends a row at
the model's own word. A file that does not parse (or decode) is one document. One file in `heldout_every` is held
out by a hash of its relative path: deterministic, and the same file on every machine whatever else it holds.
Stdlib only (ast, hashlib, numpy's arrays): the same documents wherever the same files are.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import numpy

from tokengen.contract.trained import corpus_files

EOS = 256  # the end-of-document id, after the 256 byte values: EOS, and BOS where a document starts
BLOCKS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def documents(source: bytes) -> list[bytes]:
    """A module's top-level blocks and the text between them, in order, each stripped of blank lines at its ends
    and ended by one newline; whitespace-only pieces left out."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        pieces = [source]
    else:
        lines = source.splitlines(keepends=True)
        pieces, done = [], 0
        for node in tree.body:
            if isinstance(node, BLOCKS):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
                pieces += [b"".join(lines[done:start]), b"".join(lines[start : node.end_lineno])]
                done = node.end_lineno
        pieces.append(b"".join(lines[done:]))
    return [piece.strip(b"\r\n") + b"\n" for piece in pieces if piece.strip()]


def held_out(relative: str, every: int) -> bool:
    """Whether a file (by its path relative to the corpus's root) is held out: one in `every`, by its hash."""
    return int.from_bytes(hashlib.sha256(relative.encode()).digest()[:8], "little") % every == 0


def split(root: Path, every: int) -> tuple[list[bytes], list[bytes]]:
    """(training documents, held-out documents) of the corpus under `root`, in the files' sorted order."""
    train, heldout = [], []
    for relative, path in corpus_files(root):
        (heldout if held_out(relative, every) else train).extend(documents(path.read_bytes()))
    return train, heldout


def stream(docs: list[bytes]) -> numpy.ndarray:
    """The documents as one uint16 array of ids: EOS, then each document followed by EOS (so every document starts
    after an EOS, which is also its BOS)."""
    parts = [numpy.array([EOS], dtype=numpy.uint16)]
    for doc in docs:
        parts += [numpy.frombuffer(doc, dtype=numpy.uint8).astype(numpy.uint16), parts[0]]
    return numpy.concatenate(parts)
