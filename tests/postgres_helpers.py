"""A real PostgreSQL server for the tests (and the record-rate benchmark): `initdb` and `pg_ctl` in a
temporary folder, listening on 127.0.0.1 at a free port, its socket in that folder. initdb refuses
to run as root, so as root the server runs as a throwaway user (`tokengen_pg`, made if missing).

Local logins are trusted, except one role (PASSWORD_ROLE) that must give its password
(scram-sha-256), so a test can show a password taken from PGPASSWORD and a wrong one refused."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SERVER_USER = "tokengen_pg"  # who runs initdb and postgres when the tests run as root
PASSWORD_ROLE, ROLE_PASSWORD = "tokengen_pw", "tokengen-test-pg-pw"
HBA = f"""local all all trust
host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""


def postgres_bin() -> Path | None:
    """The folder holding initdb and pg_ctl: the newest Debian package's, else the PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def missing() -> str | None:
    """Why no server can be started here (one line), or None."""
    if postgres_bin() is None:
        return "PostgreSQL is not installed: apt-get install postgresql (.ci/run does)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "PostgreSQL refuses root and runuser is missing: run the tests as another user"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is missing: pip install -c constraints.txt -e '.[postgres]'"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    if subprocess.run(["id", "-u", SERVER_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", SERVER_USER], check=True, capture_output=True)
    return ["runuser", "-u", SERVER_USER, "--", *argv]


@dataclass
class Postgres:
    root: Path
    port: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    def start(self) -> "Postgres":
        """initdb (no fsync: a test server), the test's pg_hba.conf, and pg_ctl start, waiting until it answers."""
        self.port = self.port or free_port()
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o777)
        binary = postgres_bin()

        def run(*argv):
            return subprocess.run(
                _as_server_user([str(a) for a in argv]), check=True, capture_output=True, text=True, cwd=self.root
            )

        if not self.data.exists():
            run(binary / "initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
            (self.data / "pg_hba.conf").write_text(HBA)
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        run(
            binary / "pg_ctl", "-D", self.data, "-o", options, "-l", self.root / "server.log", "-w", "-t", "60", "start"
        )
        return self

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run(
                _as_server_user([str(postgres_bin() / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]),
                capture_output=True,
                cwd=self.root,
            )

    def execute(self, *statements: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=database, autocommit=True
        ) as connection:
            for statement in statements:
                connection.execute(statement)

    def create_database(self, name: str, owner: str = "postgres") -> str:
        """A new empty database; returns its URI (no password in it: trusted, or PGPASSWORD)."""
        self.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        return self.uri(name, owner)

    def create_password_role(self) -> None:
        self.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{ROLE_PASSWORD}'")

    def uri(self, database: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"


def started(prefix: str = "tokengen-pg-") -> Postgres:
    """A new server in a new temporary folder (the caller stops it)."""
    return Postgres(Path(tempfile.mkdtemp(prefix=prefix))).start()
