"""The environment a trial process runs in, decided in one place.

Torch-free, so the sweep's Ray task can compute a trial's environment without importing torch, and
the trial itself (`measure.set_allocator`) applies the very same rule: the allocator knob owns
`expandable_segments` and nothing else; a user's other allocator options are kept; the older
`PYTORCH_CUDA_ALLOC_CONF` is folded into `PYTORCH_ALLOC_CONF`, so a `default` trial is really default.
"""

from __future__ import annotations

from typing import Mapping

ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
SECRETS = (
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_AUTH_ADMIN_PASSWORD",
    "MLFLOW_TRACKING_CLIENT_CERT_PATH",
    "PGPASSWORD",  # libpq's, for a PostgreSQL store
    "PGPASSFILE",
    "MYSQL_PWD",  # MySQL's client library, for a MySQL store
)
"""The tracking store's credentials, every store's (a URI never carries them: tracking/store/credentials.py): only
the processes that talk to the store (the driver, the report) read them, so no Ray process or trial gets them."""
EXPANDABLE = "expandable_segments:True"


def allocator_conf(base: Mapping[str, str], allocator: str) -> str:
    """The PYTORCH_ALLOC_CONF a trial with this allocator knob gets, given the caller's environment."""
    options = ",".join(filter(None, (base.get(name, "") for name in ALLOC_VARS)))
    kept = [o for o in options.split(",") if o and not o.startswith("expandable_segments")]
    if allocator == "expandable":
        kept.append(EXPANDABLE)
    return ",".join(kept)


def trial_environment(
    base: Mapping[str, str], allocator: str, inductor_dir: str | None = None, threads: int | None = None
) -> dict[str, str]:
    """`base` with the trial's allocator, compile cache, thread count, no hub access and no credentials."""
    env = {k: v for k, v in base.items() if k not in ALLOC_VARS and k not in SECRETS}
    conf = allocator_conf(base, allocator)
    if conf:
        env["PYTORCH_ALLOC_CONF"] = conf
    if inductor_dir:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env
