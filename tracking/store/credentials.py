"""No secret in any part of a store URI: a password in its userinfo, or a query parameter that carries one
(`password=`, `passfile=`, any whose name holds `pass`, `secret` or `token`; any scheme), is refused in one
line that names the URI without it and the variable its store's client reads the secret from instead. A secret
on a command line ends up in Hydra's files, the sweep's artifacts, the reports and printed lines; a secret in
the environment stays with the processes that talk to the store (tokengen/contract/machine/process_env.py's
SECRETS keep it from Ray's processes and the trials).
"""

from __future__ import annotations

import urllib.parse

SERVER_SCHEMES = ("http", "https")
CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")  # MLflow's own names, read by its client
TOKEN = "MLFLOW_TRACKING_TOKEN"  # MLflow's bearer token for a server
# Where each kind of store takes its password instead of the URI (its driver reads it there).
PASSWORD_PLACES = {
    "postgresql": "PGPASSWORD or ~/.pgpass (libpq reads both)",
    "mysql": "MYSQL_PWD or an option file (~/.my.cnf, [client] password=...)",
    "mssql": "a DSN of your ODBC driver or a trusted connection",
}
PASSFILE_PLACES = {"postgresql": "PGPASSFILE (libpq reads it)"}  # a password file's own variable
SECRET_WORDS = ("pass", "secret", "token")  # a query parameter whose name holds one carries a secret


def _secret_parameters(query: str) -> list[str]:
    """The raw `name=value` parts of a query whose name holds a secret's word."""
    named = [(part, urllib.parse.unquote_plus(part.split("=", 1)[0]).lower()) for part in query.split("&")]
    return [part for part, name in named if any(word in name for word in SECRET_WORDS)]


def without_secrets(uri: str, user: bool = True) -> str:
    """The URI without its userinfo's password (and, with `user` False, its user) or its secret query
    parameters; the rest as written (a round trip through urlunsplit would turn sqlite:///x into sqlite:/x)."""
    parsed = urllib.parse.urlsplit(uri)
    userinfo, at, host = parsed.netloc.rpartition("@")
    name = userinfo.split(":", 1)[0] if user else ""
    kept = uri.replace(parsed.netloc, f"{name}@{host}" if name else host, 1) if at else uri
    secrets = _secret_parameters(parsed.query) if parsed.query else []
    if secrets:
        query = "&".join(part for part in parsed.query.split("&") if part not in secrets)
        kept = kept.replace("?" + parsed.query, "?" + query if query else "", 1)
    return kept


def redacted(uri: str) -> str:
    """The URI without the user and password its authority may carry, nor a secret in its query, for a
    printed line."""
    return without_secrets(uri, user=False)


def _place(scheme: str, name: str) -> str:
    """Where a store's client reads the secret a URI carried in `name`: the variable (or file) to use."""
    if scheme in SERVER_SCHEMES:
        return TOKEN if "token" in name else f"{CREDENTIALS[0]} and {CREDENTIALS[1]}"
    if name == "passfile" and scheme in PASSFILE_PLACES:
        return PASSFILE_PLACES[scheme]
    return PASSWORD_PLACES.get(scheme, "the environment variable or file its database driver reads")


def credentials_problem(uri: str, option: str = "tracking.uri=") -> str | None:
    """The one line that refuses a URI carrying a secret in any part, or a server's URI carrying a user, or
    None (`option` is how the user gave it: `tracking.uri=` or `--uri `). Never the secret itself."""
    parsed = urllib.parse.urlsplit(uri)
    scheme = parsed.scheme.split("+", 1)[0].lower()
    key = option.rstrip("= ")
    userinfo = parsed.netloc.rpartition("@")[0]
    if scheme in SERVER_SCHEMES and "@" in parsed.netloc:
        return (
            f"{key} carries credentials: use {option}{redacted(uri)} and put them in "
            f"{CREDENTIALS[0]} and {CREDENTIALS[1]}, which stay with the driver"
        )
    if ":" in userinfo:
        return (
            f"{key} carries a password: use {option}{without_secrets(uri)} and put the password in "
            f"{_place(scheme, 'password')}, which stays out of every file and printed line"
        )
    secrets = _secret_parameters(parsed.query) if parsed.query else []
    if not secrets:
        return None
    name = urllib.parse.unquote_plus(secrets[0].split("=", 1)[0])
    stays = "stays with the driver" if scheme in SERVER_SCHEMES else "stays out of every file and printed line"
    return (
        f"{key} carries a secret in its query ({name}=...): use {option}{without_secrets(uri)} and put it in "
        f"{_place(scheme, name.lower())}, which {stays}"
    )
