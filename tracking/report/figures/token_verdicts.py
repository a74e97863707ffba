"""Does each variant return its reference's tokens (its baseline's, else its plain twin's or generate() peer's:
tracking/report/figures/references.py)? Checksums first, token files only where they differ.

In float32 (at matmul_precision=highest) every variant must return exactly the baseline's tokens,
so a differing `tokens_sha256` is a MISMATCH. With TF32 (matmul_precision=high) and in bfloat16/float16 a cached step legitimately rounds differently from the full
recompute, so the report says how far the two agree: each row's decode steps up to its first
differing token, the minimum over the batch rows. A no-check variant runs all max_seqlen steps
(EOS padding after the baseline's end), so only the baseline's length is compared. Token files
(`tokens.npy`, int64 [batch, 1 + steps], BOS column first) are downloaded only for the pairs
whose checksums differ, each file once.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tokengen.contract.declarations import BOUND, in_family
from tokengen.contract.names import FINISHED, TOKENS_FILE
from tracking.store.reading import fetch_artifacts, is_missing

HOW = (
    "agree k/N: every batch row matches its reference for its first k of the reference's N decode steps "
    "(k is the minimum over the rows; BOS excluded; a no-check variant is compared over the reference's length only)"
)


def agreed_steps(tokens: np.ndarray, base: np.ndarray, prompt_len: int = 1) -> int:
    """Decode steps every row agrees on before its first differing token (minimum over rows)."""
    length = min(tokens.shape[1], base.shape[1])
    if tokens.shape[0] != base.shape[0]:
        return 0
    differs = tokens[:, prompt_len:length] != base[:, prompt_len:length]  # (B, steps), the prompt dropped
    first = np.where(differs.any(axis=1), differs.argmax(axis=1), length - prompt_len)
    return int(first.min()) if len(first) else 0


def extra_steps_ok(tokens: np.ndarray, base: np.ndarray, stop_check: str) -> bool:
    """A run longer than its baseline is right only as a no-check run padding with one token (EOS)
    throughout; any other extra step (a lagged check that kept its extra token) is a bug."""
    if tokens.shape[1] <= base.shape[1]:
        return tokens.shape[1] == base.shape[1]
    if stop_check not in in_family("stop_check", BOUND) or tokens.shape[0] != base.shape[0]:
        return False
    return np.unique(tokens[:, base.shape[1] :]).size == 1


def exact(dtype: str, matmul_precision: str = "highest") -> bool:
    """Whether tokens must match bit for bit: float32 at full matmul precision. TF32 (`high`, the
    article's setting) and half precisions round differently along different paths."""
    return dtype == "float32" and matmul_precision in ("highest", "", "None", "nan")


def verdict(dtype: str, agreed: int | None, steps: int, matmul_precision: str = "highest") -> str:
    """For a trial whose checksum differs from its baseline's, after comparing the token files."""
    strict = exact(dtype, matmul_precision)
    if agreed is None:
        return "MISMATCH (no tokens.npy)" if strict else "differs (no tokens.npy)"
    if agreed >= steps:
        return "ok"  # a no-check run: the baseline's tokens, then EOS padding
    return f"MISMATCH ({agreed}/{steps})" if strict else f"agree {agreed}/{steps}"


def check_tokens(frame: pd.DataFrame, base: pd.Series, client=None) -> tuple[pd.Series, pd.Series, int]:
    """Per row: a verdict ('ok', 'MISMATCH (k/N)', 'agree k/N', 'n/a' without checksums, '' for a
    baseline or a trial without a reference), the agreeing steps, and how many token files were downloaded.
    `base` holds each row's reference's label; `client` reads the token files (None: checksums only). The
    columns are read as dicts: a pandas look-up per row costs seconds at thousands of trials."""
    named = ("tokens_sha256", "steps", "status", "run_id", "prompt_len", "stop_check", "matmul_precision", "dtype")
    column = {c: frame[c].to_dict() if c in frame else dict.fromkeys(frame.index) for c in named}
    sha, steps = column["tokens_sha256"], column["steps"]
    verdicts, agreed = dict.fromkeys(frame.index, ""), dict.fromkeys(frame.index, float("nan"))
    pending = []
    for label, b in base.items():
        if b is None or b == label or column["status"][label] != FINISHED:
            continue
        if is_missing(sha[label]) or is_missing(sha[b]):
            verdicts[label] = "n/a"
        elif sha[label] == sha[b]:
            verdicts[label], agreed[label] = "ok", steps[b]
        else:
            pending.append((label, b))
    files = {}
    if pending and client is not None:
        files = fetch_artifacts(client, frame, {i for pair in pending for i in pair}, TOKENS_FILE, np.load)
    for label, b in pending:
        mine, theirs = files.get(column["run_id"][label]), files.get(column["run_id"][b])
        prompt = 1 if is_missing(column["prompt_len"][label]) else int(column["prompt_len"][label])
        count = agreed_steps(mine, theirs, prompt) if mine is not None and theirs is not None else None
        length = theirs.shape[1] - prompt if theirs is not None else steps[b]
        if count is not None and not extra_steps_ok(mine, theirs, str(column["stop_check"][label])):
            verdicts[label], agreed[label] = f"MISMATCH (shape {mine.shape[1] - prompt} vs {int(length)} steps)", count
            continue
        precision = column["matmul_precision"][label] if "matmul_precision" in frame else "highest"
        steps_run = 0 if is_missing(length) else int(length)
        verdicts[label] = verdict(str(column["dtype"][label]), count, steps_run, str(precision))
        agreed[label] = float("nan") if count is None else count
    in_order = [verdicts[r] for r in frame.index], [agreed[r] for r in frame.index]
    return pd.Series(in_order[0], frame.index, dtype=object), pd.Series(in_order[1], frame.index, float), len(files)
