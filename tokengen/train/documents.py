"""The training text: the standard library's .py files as documents of bytes, each ended by the end-of-document id.

A document is one top-level block of a module: a `def` or `class` with its decorators and body, or the module's
text between two of them (imports, constants, comments), its blank lines at either end dropped, then ended as PEP 8
separates top-level blocks: a newline and two blank lines. A block's end is uncertain where its last line ends
(another indented line may follow); the two blank lines a model writes once it judges the block over are the
signal, so a model that learns where a block ends says the end-of-document id after them, and `stop=model` ends a
row at the model's own word. Each line's indentation is a tab per four spaces (the rest kept as spaces), as Python
reads it: a level is one byte, so a model that writes a line's indentation chooses among a few tabs instead of
counting a run of up to sixteen spaces (a small model that cannot count collapses into spaces). A file that does not parse (or decode) is one document. One file in `heldout_every` is held
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
ENDING = b"\n\n\n"  # a document's last line ended, then PEP 8's two blank lines between top-level blocks
BLOCKS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def tabbed(text: bytes) -> bytes:
    """Every line's leading spaces as a tab per four, the remainder as spaces."""
    lines = text.split(b"\n")
    for n, line in enumerate(lines):
        spaces = len(line) - len(line.lstrip(b" "))
        lines[n] = b"\t" * (spaces // 4) + b" " * (spaces % 4) + line[spaces:]
    return b"\n".join(lines)


def documents(source: bytes) -> list[bytes]:
    """A module's top-level blocks and the text between them, in order, each stripped of blank lines at its ends
    and ended by ENDING, indentation tabbed; whitespace-only pieces left out."""
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
    return [tabbed(piece.strip(b"\r\n")) + ENDING for piece in pieces if piece.strip()]


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
