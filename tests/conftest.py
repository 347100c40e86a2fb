"""Fixtures: real server processes on 127.0.0.1 (SQLite and PostgreSQL stores), and the CLI run in-process.

Every server is a subprocess started with `akka server start --port 0`; it writes `server.json` once ready.
Tests share one server per backend and keep apart by using their own namespaces.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent
POSTGRES_ADMIN_URL = os.environ.get("OPTIMIZE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class ServerProcess:
    url: str
    data_dir: Path
    process: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def kill9(self) -> None:
        self.process.kill()
        self.process.wait(5)


def start_server(data_dir: Path, database_url: str | None = None, env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None) -> ServerProcess:
    data_dir.mkdir(parents=True, exist_ok=True)
    ready = data_dir / "server.json"
    ready.unlink(missing_ok=True)
    log = data_dir / "server.log"
    command = [sys.executable, "-m", "optimize", "server", "start", "--port", "0", "--data-dir", str(data_dir)]
    if database_url:
        command += ["--database-url", database_url]
    command += extra_args or []
    # Tests never reach a model hub: say so, as an offline deployment would.
    process_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    process_env.pop("OPTIMIZE_CRASH_AT", None)
    with log.open("ab") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=process_env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {log.read_text()[-3000:]}")
        if ready.exists():
            try:
                url = json.loads(ready.read_text())["url"]
                if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                    return ServerProcess(url, data_dir, process, log)
            except (ValueError, KeyError, httpx.HTTPError):
                pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not start: {log.read_text()[-3000:]}")


def postgres_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001 - any failure means "no PostgreSQL here"
        return False


def fresh_postgres_url() -> str:
    """A URL whose tables live in a new schema of the test database, so runs never see each other's rows."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    return f"{POSTGRES_ADMIN_URL}?options=-csearch_path%3D{schema}"


def migrated_store(backend: str, folder: Path):
    """A migrated store on SQLite (a file in `folder`) or on a fresh PostgreSQL schema (skips without one)."""
    from optimize.store.db import Store
    from optimize.store.migrate import upgrade

    if backend == "postgres":
        if not postgres_available():
            pytest.skip("no PostgreSQL answers")
        url = fresh_postgres_url()
    else:
        url = f"sqlite:///{folder / 'store.db'}"
    upgrade(url)
    return Store(url)


@pytest.fixture(scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def server(request, tmp_path_factory) -> ServerProcess:
    """One server per store backend for the whole session."""
    database_url = None
    if request.param == "postgres":
        if not postgres_available():
            pytest.skip(f"no PostgreSQL answers at {POSTGRES_ADMIN_URL}")
        database_url = fresh_postgres_url()
    proc = start_server(tmp_path_factory.mktemp(f"server-{request.param}"), database_url)
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def sqlite_server(tmp_path_factory) -> ServerProcess:
    proc = start_server(tmp_path_factory.mktemp("server-sqlite-only"))
    yield proc
    proc.stop()


@pytest.fixture
def server_factory(tmp_path):
    """Start extra servers (own data dir, own settings) for one test; all are stopped after it."""
    started: list[ServerProcess] = []

    def factory(name: str = "extra", env: dict[str, str] | None = None, database_url: str | None = None,
                extra_args: list[str] | None = None):
        proc = start_server(tmp_path / name, database_url, env, extra_args)
        started.append(proc)
        return proc

    yield factory
    for proc in started:
        proc.stop()


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def json(self):
        return json.loads(self.out)


class Cli:
    """Runs `akka` in this process against one server, capturing what it prints."""

    def __init__(self, capsys, url: str) -> None:
        self.capsys = capsys
        self.url = url

    def __call__(self, *args: str) -> CliResult:
        from optimize.cli.main import main

        self.capsys.readouterr()
        code = main([*args, "--server", self.url] if _takes_server(args) else list(args))
        captured = self.capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    def ok(self, *args: str) -> CliResult:
        result = self(*args)
        assert result.code == 0, f"akka {' '.join(args)} exited {result.code}: {result.err}"
        return result

    def json(self, *args: str):
        return self.ok(*args, "-o", "json").json


def _takes_server(args: tuple[str, ...]) -> bool:
    return "--help" not in args and args[:2] != ("server", "start")


@pytest.fixture
def cli(capsys, server) -> Cli:
    return Cli(capsys, server.url)


@pytest.fixture
def ns() -> str:
    """A namespace no other test uses."""
    return f"t{uuid.uuid4().hex[:10]}"


def write_jsonl(path: Path, rows: list) -> Path:
    with path.open("w") as handle:
        for row in rows:
            handle.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def chat_row(question: str = "hi", answer: str = "hello", **extra) -> dict:
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}], **extra}


def pair_row(question: str = "hi", chosen: str = "good", rejected: str = "bad", **extra) -> dict:
    return {
        "prompt": [{"role": "user", "content": question}],
        "chosen": {"role": "assistant", "content": chosen},
        "rejected": {"role": "assistant", "content": rejected},
        **extra,
    }
