"""Throwaway backing services for a broker under test: Redis and a PostgreSQL cluster.

The ``tbmq-style`` broker (``mqbench/brokers/definitions/tbmq_style.py``) persists into Redis
or PostgreSQL; when a scenario gives no ``redis_url`` / ``postgres_dsn``, its spec starts one
of these before the broker and stops it after the broker, by PID:

- ``redis-server`` on a free loopback port, ``save ""``, ``appendonly no``, its own
  directory ``<workdir>/redis``, log in ``<workdir>/redis.log``.
- A PostgreSQL 15 cluster: ``initdb`` (trust auth, user ``postgres``) and ``postgres`` on
  a free loopback port with its socket in the data directory. PostgreSQL refuses to run
  as root: when mqbench runs as root, both run as the system user ``postgres`` (Debian's
  package creates it; ``subprocess`` switches uid/gid in the child, no ``su`` wrapper),
  and the data directory is a fresh ``/tmp/mqbench-pg-*`` owned by that user (a root-only
  work directory such as pytest's is not reachable for it); it is deleted when the
  Python process that created it exits. As a non-root user the cluster lives in
  ``<workdir>/postgres``. Server settings are the stock ones (fsync and synchronous commit
  on) unless the caller asks otherwise.

Both are guarded by ``mqbench/lifeline.py`` (they die with mqbench).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from mqbench.brokers.runtime.net import free_port, recv_line, tcp_connect
from mqbench.errors import BrokerError
from mqbench.process import lifeline

PG_BIN: Final = Path("/usr/lib/postgresql/15/bin")
SERVICE_START_TIMEOUT_S: Final = 60.0
STOP_GRACE_S: Final = 10.0


def _wait(
    check: Any, timeout_s: float, proc: subprocess.Popen[bytes], what: str, log: Path
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
            raise BrokerError(f"{what} exited during start-up (code {proc.returncode}): {tail}")
        if check():
            return
        time.sleep(0.1)
    raise BrokerError(f"{what} did not become ready within {timeout_s:g} s (log: {log})")


def _terminate(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    try:
        _terminate_now(proc, sig)
    finally:
        lifeline.release(proc.pid)


def _terminate_now(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


class RedisService:
    """A throwaway ``redis-server`` (no persistence) on a free loopback port."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1", port: int | None = None) -> None:
        """Nothing runs until :meth:`start`."""
        self.workdir = workdir
        self.host = host
        self.port = port or free_port(host)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "redis.log"

    @property
    def url(self) -> str:
        """``redis://host:port/0``."""
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout_s: float = SERVICE_START_TIMEOUT_S) -> RedisService:
        """Start and wait for PONG; BrokerError (nothing left running) when it fails."""
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).exists():
            raise BrokerError(
                "redis-server not found; install it with: apt-get install redis-server"
            )
        data = self.workdir / "redis"
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(data),
            "--logfile", "",
            "--protected-mode", "yes",
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True,
            )  # fmt: skip
        lifeline.guard(self.proc.pid)
        try:
            _wait(self._ping, timeout_s, self.proc, "redis-server", self.log_path)
        except BaseException:
            self.stop()
            raise
        return self

    def _ping(self) -> bool:
        sock = tcp_connect(self.host, self.port, 0.5)
        if sock is None:
            return False
        try:
            sock.sendall(b"PING\r\n")
            return recv_line(sock, time.monotonic() + 1.0) == b"+PONG\r\n"
        except OSError:
            return False
        finally:
            sock.close()

    @property
    def pid(self) -> int | None:
        """The server's PID while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) by PID; idempotent."""
        if self.proc is not None:
            _terminate(self.proc)


def _cleanup_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


class PostgresService:
    """A throwaway PostgreSQL 15 cluster (see the module docstring for users and dirs)."""

    def __init__(
        self,
        workdir: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        synchronous_commit: str = "on",
    ) -> None:
        """Nothing runs until :meth:`start`."""
        self.workdir = workdir
        self.host = host
        self.port = port or free_port(host)
        self.synchronous_commit = synchronous_commit
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "postgres.log"
        self.data_dir: Path | None = None
        self.user: str | None = None

    @property
    def dsn(self) -> str:
        """``postgresql://postgres@host:port/postgres``."""
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    @staticmethod
    def available() -> bool:
        """True when initdb and postgres are installed."""
        return (PG_BIN / "initdb").exists() and (PG_BIN / "postgres").exists()

    def start(self, timeout_s: float = SERVICE_START_TIMEOUT_S) -> PostgresService:
        """initdb + postgres; wait until it accepts connections."""
        if not self.available():
            raise BrokerError(
                f"PostgreSQL 15 not found in {PG_BIN}; install it with: apt-get install postgresql"
            )
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise BrokerError(
                    "PostgreSQL refuses to run as root and there is no 'postgres' user "
                    "(create one: useradd -r postgres)"
                ) from None
            self.user = "postgres"
            kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
            self.data_dir = Path(tempfile.mkdtemp(prefix="mqbench-pg-"))
            os.chown(self.data_dir, pw.pw_uid, pw.pw_gid)
            atexit.register(_cleanup_dir, self.data_dir)
            env = {**os.environ, "HOME": pw.pw_dir, "USER": "postgres", "LOGNAME": "postgres"}
        else:
            self.data_dir = self.workdir / "postgres"
            env = dict(os.environ)
        self.workdir.mkdir(parents=True, exist_ok=True)
        pgdata = self.data_dir / "data"
        with self.log_path.open("wb") as log:
            init = subprocess.run(
                [str(PG_BIN / "initdb"), "-D", str(pgdata), "-U", "postgres", "-A", "trust",
                 "-E", "UTF8", "--no-sync", "--no-instructions"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, cwd=self.data_dir, timeout=120, check=False, **kwargs,
            )  # fmt: skip
        if init.returncode != 0:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise BrokerError(f"initdb failed (code {init.returncode}): {tail}")
        argv = [
            str(PG_BIN / "postgres"), "-D", str(pgdata), "-p", str(self.port),
            "-c", f"listen_addresses={self.host}", "-c", f"unix_socket_directories={self.data_dir}",
            "-c", f"synchronous_commit={self.synchronous_commit}", "-c", "max_connections=50",
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=self.data_dir, start_new_session=True, close_fds=True, **kwargs,
            )  # fmt: skip
        lifeline.guard(self.proc.pid)
        isready = str(PG_BIN / "pg_isready")
        try:
            _wait(
                lambda: subprocess.run(
                    [isready, "-q", "-h", self.host, "-p", str(self.port), "-t", "1"],
                    check=False, timeout=5, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ).returncode == 0,
                timeout_s, self.proc, "postgres", self.log_path,
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def pid(self) -> int | None:
        """The postmaster's PID while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGKILL; idempotent."""
        if self.proc is not None:
            _terminate(self.proc, signal.SIGINT)
