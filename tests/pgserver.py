"""Start a real PostgreSQL server for tests, on a unix socket, and stop it by its pid.

    with start_postgres() as pg:
        url = pg.create_database("keys")   # postgresql://postgres@/keys?host=/tmp/pgserver-...
        ...

The server runs as the ``postgres`` user (initdb and postgres refuse to run as root) from a
temporary folder that it owns, with fsync off: test data is thrown away. It listens only on a
socket in that folder (no TCP), so it needs no port: nothing to probe, nothing another process can
take between the probe and the bind. Debian's ``postgresql``
package provides the binaries (found under /usr/lib/postgresql/<version>/bin; ``POSTGRES_BIN``
overrides).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEBIAN_ROOT = "/usr/lib/postgresql"
SUPERUSER = "postgres"


def postgres_bin() -> Path:
    """$POSTGRES_BIN, else the newest Debian install (15 on bookworm, 17 on trixie, ...)."""
    if "POSTGRES_BIN" in os.environ:
        return Path(os.environ["POSTGRES_BIN"])
    installed = sorted(
        (p.parent for p in Path(DEBIAN_ROOT).glob("*/bin/postgres")),
        key=lambda bin_dir: int(bin_dir.parent.name) if bin_dir.parent.name.isdigit() else 0,
    )
    return installed[-1] if installed else Path(DEBIAN_ROOT, "15", "bin")


def _require_binaries() -> None:
    if not (postgres_bin() / "postgres").exists():
        raise RuntimeError(
            f"no PostgreSQL server under {postgres_bin()}: apt-get install -y postgresql "
            "(or set POSTGRES_BIN to the folder holding initdb, postgres, pg_isready, psql)"
        )


class PostgresServer:
    """A running server: its socket folder, URLs for its databases, and how to stop it."""

    def __init__(self, proc: subprocess.Popen[bytes], root: Path) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.root = root
        """The temp folder: the data, the log, and the socket (``.s.PGSQL.5432``)."""
        self.log_path = root / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{database}?host={self.root}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        result = subprocess.run(
            [str(postgres_bin() / "psql"), "-h", str(self.root), "-U", SUPERUSER, "-d", database,
             "-v", "ON_ERROR_STOP=1", "-Atc", sql],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        return result.stdout

    def create_database(self, name: str) -> str:
        """A fresh, empty database; its URL."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGINT is PostgreSQL's fast shutdown; SIGKILL if it does not finish in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)


def _as_postgres(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        args, user=SUPERUSER, group=SUPERUSER, extra_groups=[], **kwargs
    )


def _init_cluster(root: Path) -> Path:
    data = root / "data"
    proc = _as_postgres(
        [str(postgres_bin() / "initdb"), "-D", str(data), "-A", "trust", "-U", SUPERUSER,
         "--no-sync", "--encoding=UTF8", "--locale=C"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"initdb failed ({proc.returncode}):\n{out.decode()}")
    return data


def _wait_ready(server: PostgresServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    isready = [str(postgres_bin() / "pg_isready"), "-q", "-h", str(server.root)]
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"postgres exited early:\n{server.log_path.read_text()}")
        if subprocess.run(isready, check=False, timeout=10).returncode == 0:
            return
        time.sleep(0.05)
    raise TimeoutError(f"postgres not ready in {timeout}s:\n{server.log_path.read_text()}")


def spawn_postgres(timeout: float = 60.0) -> PostgresServer:
    """Start a server; the caller must call ``.stop()``."""
    _require_binaries()
    root = Path(tempfile.mkdtemp(prefix="pgserver-"))
    shutil.chown(root, SUPERUSER, SUPERUSER)
    try:
        data = _init_cluster(root)
        with (root / "postgres.log").open("wb") as log:
            shutil.chown(root / "postgres.log", SUPERUSER, SUPERUSER)
            proc = _as_postgres(
                [str(postgres_bin() / "postgres"), "-D", str(data), "-k", str(root),
                 "-c", "listen_addresses=", "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    server = PostgresServer(proc, root)
    try:
        _wait_ready(server, timeout)
    except BaseException:
        server.stop()
        raise
    return server


@contextmanager
def start_postgres(timeout: float = 60.0) -> Iterator[PostgresServer]:
    server = spawn_postgres(timeout)
    try:
        yield server
    finally:
        server.stop()
