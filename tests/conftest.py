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
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent
# The CLI's tables are as wide as COLUMNS says when it prints to no terminal; the tests read whole cells, under
# pytest alone or its parallel workers (which see another COLUMNS) alike.
os.environ["COLUMNS"] = "160"
# Servers the tests start (and apps they create in-process) may import models from the temporary folders the tests
# build them in, and only there.
os.environ.setdefault("OPTIMIZE_IMPORT_ROOTS", tempfile.gettempdir())
# One compute thread per process: the suite runs two files at once, each with its server's workers and endpoints,
# and torch's default of a thread per core makes every one of those processes contend for every core (the stand-ins'
# matrices are far too small to gain from a second thread; the whole suite took about twice as long).
# Set before anything imports torch, so this process and every server, worker and endpoint it starts inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
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

    @property
    def token(self) -> str | None:
        """The server's admin token (the file it writes in its data dir at its first start)."""
        path = self.data_dir / "admin-token"
        return path.read_text().strip() if path.exists() else None

    @property
    def headers(self) -> dict[str, str]:
        """Headers that authenticate a direct HTTP call to this server as its administrator."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


_SERVER_HEADERS: dict[str, dict[str, str]] = {}  # url -> its admin's headers, for helpers given only a URL


def headers_for(url: str) -> dict[str, str]:
    """The admin's headers for a server this session started, found by its URL (or any URL on it)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return _SERVER_HEADERS[f"{parts.scheme}://{parts.netloc}"]


_SHARED_WARM: list[subprocess.Popen] = []


def share_a_warm_worker() -> None:
    """One warm worker for every server this test process starts (OPTIMIZE_WARM_WORKER_SOCKET), rather than one
    per server that runs a job: each imports torch, Transformers, PEFT and TRL, seconds of CPU. A server started
    with settings of its own (a test's `env`) warms its own, as the setting says."""
    if _SHARED_WARM:
        return
    import atexit
    import shutil

    folder = Path(tempfile.mkdtemp(prefix="optimize-warm-"))
    path = folder / "warm.sock"
    with (folder / "warm.log").open("ab") as sink:
        process = subprocess.Popen([sys.executable, "-m", "optimize.worker.warm", "-" * 4096, "--listen", str(path)],
                                   stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    _SHARED_WARM.append(process)
    atexit.register(shutil.rmtree, folder, True)
    atexit.register(process.kill)
    deadline = time.monotonic() + 30
    while not path.exists():  # bound before it imports: a server that connects meanwhile waits for it
        if process.poll() is not None or time.monotonic() > deadline:
            return  # each server warms its own
        time.sleep(0.05)
    os.environ["OPTIMIZE_WARM_WORKER_SOCKET"] = str(path)


def start_server(data_dir: Path, database_url: str | None = None, env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None) -> ServerProcess:
    share_a_warm_worker()
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
    with httpx.Client(timeout=2) as client:  # one client: each new one reads the certificate authorities again
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}: {log.read_text()[-3000:]}")
            if ready.exists():
                try:
                    url = json.loads(ready.read_text())["url"]
                    if client.get(f"{url}/v1/health").status_code == 200:
                        started = ServerProcess(url, data_dir, process, log)
                        _SERVER_HEADERS[url] = started.headers
                        return started
                except (ValueError, KeyError, httpx.HTTPError):
                    pass
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not start: {log.read_text()[-3000:]}")


_STANDINS: dict[str, Path] = {}  # catalog entry id -> its stand-in, built once per session


def built_standin(model: str) -> Path:
    """The stand-in of a catalog entry, built once per test session the way a server builds it (in a child
    process, offline); removed when the session ends."""
    if model not in _STANDINS:
        import atexit
        import shutil
        import tempfile

        from optimize.catalog.catalog import load_catalog

        entry = load_catalog().find(model)
        root = Path(tempfile.mkdtemp(prefix="optimize-standin-"))
        atexit.register(shutil.rmtree, root, True)
        target = root / entry.id.replace("/", "--")
        subprocess.run([sys.executable, "-m", "optimize.catalog.standins", entry.stand_in.family, entry.stand_in.size,
                        str(target)], check=True, capture_output=True, timeout=600,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
        _STANDINS[model] = target
    return _STANDINS[model]


def as_a_terminal_starts_it() -> None:
    """`preexec_fn` for a command a test interrupts with SIGINT: SIGINT's default disposition, as a shell in a
    terminal gives a command, whatever the test runner was started with (a shell gives commands it starts in the
    background SIGINT ignored, and a child inherits that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def from_standin(model: str = "optimize/tiny-llama-3.2") -> dict[str, str]:
    """The body of a select request for a stand-in base model in a test whose subject is not selection itself:
    imported (`select --from`) from the copy built once per session, instead of every server building it again
    (seconds each, even when it is selected already). The commit is the same either way, a stand-in's commit being
    the digest of its files; the selection's source reads `import`. Selection itself (building a stand-in, importing
    a snapshot, selecting again) is tested in test_base_models_cli.py and test_models_cli.py, which select the
    usual way."""
    return {"from": str(built_standin(model))}


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


_MIGRATED_SQLITE: list[Path] = []  # a SQLite store migrated to head once per test process


def migrated_sqlite(path: Path) -> None:
    """A SQLite store migrated to head at `path`: a copy (SQLite's backup) of the one this test process migrated
    first, rather than the migrations run again for each test's store (about a second each, on every store a test
    makes). Migrating itself is tested where a test runs the migrations (test_sessions_migration.py, …) and at every
    server's start."""
    import atexit
    import shutil
    import sqlite3
    from contextlib import closing

    from optimize.store.migrate import upgrade

    if not _MIGRATED_SQLITE:
        folder = Path(tempfile.mkdtemp(prefix="optimize-migrated-"))
        atexit.register(shutil.rmtree, folder, True)
        upgrade(f"sqlite:///{folder / 'store.db'}")
        _MIGRATED_SQLITE.append(folder / "store.db")
    with closing(sqlite3.connect(_MIGRATED_SQLITE[0])) as source, closing(sqlite3.connect(path)) as target:
        source.backup(target)


def migrated_store(backend: str, folder: Path):
    """A migrated store on SQLite (a file in `folder`) or on a fresh PostgreSQL schema (skips without one), with the
    server's job kinds registered with the kernel, as a server process has them (`create_app` does the same)."""
    from optimize.api.kinds import register_kinds
    from optimize.store.db import Store
    from optimize.store.migrate import upgrade

    register_kinds()
    if backend == "postgres":
        if not postgres_available():
            pytest.skip("no PostgreSQL answers")
        url = fresh_postgres_url()
        upgrade(url)
    else:
        migrated_sqlite(folder / "store.db")
        url = f"sqlite:///{folder / 'store.db'}"
    return Store(url)


@pytest.fixture(scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def server(request) -> ServerProcess:
    """One server per store backend for the whole session: for tests of what the store keeps (the registry,
    uploads, projects, the run tables' smoke in test_runs_cli.py). Everything else runs on `sqlite_server`.

    Each backend's server is a fixture of its own (`sqlite_store_server`, `postgres_server`): pytest sets a
    parametrized fixture up again whenever its param changes, which under `--dist loadfile` is at every file that
    runs on both stores, and the server must outlive that."""
    return request.getfixturevalue("postgres_server" if request.param == "postgres" else "sqlite_store_server")


@pytest.fixture(scope="session")
def sqlite_store_server(tmp_path_factory) -> ServerProcess:
    """The session's server on SQLite that `server[sqlite]` is (kept apart from `sqlite_server`)."""
    proc = start_server(tmp_path_factory.mktemp("server-sqlite"))
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory) -> ServerProcess:
    """The session's server on PostgreSQL (`server[postgres]` is the same one); skips without PostgreSQL."""
    if not postgres_available():
        pytest.skip(f"no PostgreSQL answers at {POSTGRES_ADMIN_URL}")
    proc = start_server(tmp_path_factory.mktemp("server-postgres"), fresh_postgres_url())
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def sqlite_server(tmp_path_factory) -> ServerProcess:
    proc = start_server(tmp_path_factory.mktemp("server-sqlite-only"))
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def completed_run(sqlite_server, tmp_path_factory) -> dict:
    """One supervised run trained to completion once per session on `sqlite_server`, in a project of its own
    (tests/run_fixtures.py `train_capitals`: 16 updates, saves at 6, 12 and 16, a validation set): for tests that
    need some completed run with snapshots. They only read it and refuse things on it; a test that adds runs,
    datasets or models to a project works in a project of its own."""
    from tests.run_fixtures import train_capitals

    trained = train_capitals(sqlite_server.url, tmp_path_factory.mktemp("completed-run"))
    assert trained["code"] == 0 and trained["run"]["phase"] == "COMPLETED", trained["lines"][-1]
    return trained


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """One S3-compatible server (SeaweedFS, tests/s3_server.py) for the session's S3 tests; each test or module keeps
    to buckets of its own."""
    from tests.s3_server import S3Server

    server = S3Server(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


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

    @property
    def headers(self) -> dict[str, str]:
        """Headers for a direct HTTP call to the same server, as its administrator."""
        return headers_for(self.url)

    def __call__(self, *args: str) -> CliResult:
        from optimize.cli.main import main

        self.capsys.readouterr()
        code = main([*args, "--server", self.url] if _takes_server(args) else list(args))
        captured = self.capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    def ok(self, *args: str) -> CliResult:
        result = self(*args)
        assert result.code == 0, f"akka {' '.join(args)} exited {result.code}: {result.err or result.out}"
        return result

    def json(self, *args: str):
        return self.ok(*args, "-o", "json").json


def _takes_server(args: tuple[str, ...]) -> bool:
    return "--help" not in args and args[:1] != ("--version",) and args[:2] != ("server", "start")


@pytest.fixture
def cli(capsys, server) -> Cli:
    return Cli(capsys, server.url)


@pytest.fixture
def ns() -> str:
    """A namespace no other test uses."""
    return f"t{uuid.uuid4().hex[:10]}"


def catalog_with_devices(folder: Path, devices: list[dict]) -> Path:
    """The shipped catalog with these `devices:` (e.g. a cpu profile of two slots), written into `folder`: for a
    server started with `--catalog`."""
    import yaml

    from optimize.catalog.catalog import shipped_catalog_path

    catalog = yaml.safe_load(shipped_catalog_path().read_text())
    catalog["devices"] = devices
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    return path


def shown(answer):
    """An answer a service built (or a list of them) as the API writes it: camelCase JSON."""
    if isinstance(answer, list):
        return [shown(item) for item in answer]
    return answer.model_dump(mode="json", by_alias=True)


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
