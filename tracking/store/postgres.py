"""A PostgreSQL tracking store: the URI MLflow's engine and libpq are given, and one direct login tried before
MLflow's engine (which retries a refused one for minutes), so a refused or unreachable database is one line
within seconds. The password comes from libpq's environment (PGPASSWORD) or ~/.pgpass, never the URI.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import urllib.parse

POSTGRES_SCHEMES = ("postgresql", "postgres")
POSTGRES_DRIVER = "postgresql+psycopg"  # psycopg 3, the `postgres` extra (SQLAlchemy 2.0 would pick psycopg2)
CONNECT_TIMEOUT_S = 5
OPENING_LOCK = 0x746F6B656E67656E  # pg_advisory_lock's key while MLflow makes its tables ("tokengen")
PASSWORD_FIX = "set PGPASSWORD or a ~/.pgpass line (host:port:database:user:password)"


def is_postgres(uri: str) -> bool:
    return urllib.parse.urlsplit(uri).scheme.split("+", 1)[0] in POSTGRES_SCHEMES


def engine_uri(uri: str) -> str:
    """The URI MLflow's SQLAlchemy engine is given: PostgreSQL through psycopg 3 with a connect timeout
    (a host that drops packets fails a write in seconds, and the journal keeps the result); others as given."""
    if not is_postgres(uri):
        return uri
    parsed = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qsl(parsed.query)
    if not any(name == "connect_timeout" for name, _ in query):
        query.append(("connect_timeout", str(CONNECT_TIMEOUT_S)))
    return parsed._replace(scheme=POSTGRES_DRIVER, query=urllib.parse.urlencode(query)).geturl()


def libpq_uri(uri: str) -> str:
    """The URI as libpq (psycopg.connect) reads it: no SQLAlchemy driver in its scheme."""
    return urllib.parse.urlsplit(uri)._replace(scheme="postgresql").geturl()


def postgres_problem(uri: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """One direct connection (libpq's), before MLflow's engine (which retries a refused one for minutes): why the
    database cannot be used, in one line that names the fix, or None. The password comes from libpq's
    environment (PGPASSWORD) or ~/.pgpass, as for psql."""
    parsed = urllib.parse.urlsplit(uri)
    host, port = parsed.hostname or "localhost", parsed.port or 5432
    where = f"PostgreSQL at {host}:{port}"
    try:
        import psycopg
    except ImportError:
        return f"{where} needs PostgreSQL's driver: pip install -c constraints.txt -e '.[postgres]'"
    user = parsed.username or os.environ.get("PGUSER") or getpass.getuser()
    database = parsed.path.lstrip("/") or user
    try:
        psycopg.connect(libpq_uri(uri), connect_timeout=max(1, int(timeout_s))).close()
        return None
    except psycopg.Error as exc:
        message = str(exc)
    text = " ".join(message.split())
    reason = message.rsplit(" failed: ", 1)[-1].splitlines()[0].removeprefix("FATAL:").strip()
    if "password authentication failed" in text:
        return f"{where} refused user {user!r} (password authentication failed): {PASSWORD_FIX}"
    if "no password supplied" in text:
        return f"{where} wants a password for user {user!r}: {PASSWORD_FIX}"
    if "does not exist" in text and f'database "{database}"' in text:
        return f"{where} has no database {database!r}: create it (createdb -h {host} -p {port} -U {user} {database})"
    if "does not exist" in text and "role" in text:
        return f"{where} has no user {user!r}: create it (createuser) or fix tracking.uri"
    if "pg_hba.conf" in text:
        return f"{where} refused the connection ({reason}): allow this host in its pg_hba.conf or fix tracking.uri"
    return f"{where} is unreachable ({reason}): start it or fix tracking.uri"


@contextlib.contextmanager
def one_opener(uri: str):
    """Two drivers opening one new database at once both run MLflow's migrations, and the second's CREATE TABLE
    fails on the first's: a session advisory lock on the database lets one make the tables while the other waits,
    then finds them made. It ends with its connection, whatever happens to the opener."""
    import psycopg

    with psycopg.connect(libpq_uri(uri), connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as connection:
        connection.execute("SELECT pg_advisory_lock(%s)", (OPENING_LOCK,))
        yield
