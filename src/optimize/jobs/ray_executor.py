"""The Ray executor: each job attempt's worker runs on whichever node of a Ray cluster offers its grant's devices.

A node offers a device profile as Ray custom resources: `optimize/PROFILE: N` (its N devices of that profile, the
slots runs, evaluations and distillations are granted) and, for a cpu profile, `optimize/PROFILE/serving: N` (the
slots kept for endpoints). `node_resources` writes them for `ray start --resources`. The scheduler's inventory is
what the live nodes offer now (`online`), so nodes joining and leaving change capacity, and its grants stay
exclusive across nodes: the store holds one hold per device slot, and Ray places the worker on a node that has that
many units free.

The worker is the same process the local executor starts (`python -m optimize.worker KIND JOB_ID`), run by a
detached Ray actor named after the job in the `optimize` namespace, so a restarted server finds it again. The
worker talks to the server only over HTTP with its lease token. An actor that dies with its node is a lost worker:
the kernel's recovery policy applies (a run queues again and resumes from its newest save on another node).

A node must reach the server's URL (start the server with `--host` on an address the nodes reach) and read the
model cache and data dir paths the server names (a shared filesystem; on one machine they are simply there).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from optimize.jobs import logs
from optimize.jobs.devices import DeviceProfile
from optimize.jobs.executor import ExitCallback
from optimize.jobs.leases import Grant
from optimize.jobs.local_executor import exit_reason, worker_command, worker_environment

log = logging.getLogger("optimize.jobs")
NAMESPACE = "optimize"
RESOURCE = "optimize/"  # optimize/PROFILE and optimize/PROFILE/serving
SERVING_SUFFIX = "/serving"
STOP_SECONDS = 15


def join_cluster(address: str | None) -> None:
    """Connect this process to the Ray cluster (once); a cluster that cannot be reached is refused by address."""
    import ray

    from optimize.core.errors import Invalid

    if ray.is_initialized():
        return
    try:
        ray.init(address=address or "auto", namespace=NAMESPACE, logging_level=logging.WARNING,
                 log_to_driver=False, configure_logging=False)
    except Exception as error:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError, …
        raise Invalid(f"cannot join the Ray cluster at {address or 'RAY_ADDRESS (auto)'}: "
                      f"{str(error).splitlines()[0] if str(error) else type(error).__name__}",
                      hint="start one with `ray start --head`, or pass --ray-address HOST:PORT of a running one"
                      ) from None


def node_resources(profile: str, devices: int, kind: str = "cpu") -> dict[str, float]:
    """The custom resources a node offering `devices` of `profile` starts with."""
    offered = {f"{RESOURCE}{profile}": float(devices)}
    if kind == "cpu":
        offered[f"{RESOURCE}{profile}{SERVING_SUFFIX}"] = float(devices)
    return offered


def actor_name(kind: str, job_id: str) -> str:
    return f"{kind}:{job_id}"


class RayExecutor:
    name = "ray"
    shares_grants = False  # each job's worker is an actor of its own, found by the job's name

    def __init__(self, server_url: str, data_dir: Path, on_exit: ExitCallback, address: str | None) -> None:
        import ray

        self.ray = ray
        self.server_url = server_url
        self.data_dir = data_dir
        self.log_dir = data_dir / logs.LOGS
        self.on_exit = on_exit
        self.stopping = False
        self._launched: dict[tuple[str, str], Any] = {}  # (kind, job id) -> actor handle
        self._lock = threading.Lock()
        join_cluster(address)
        self._host = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=4)(WorkerHost)

    # --- the cluster's inventory -----------------------------------------------------------------------------

    def online(self) -> list[DeviceProfile]:
        """The profiles the live nodes offer now, each with the devices they offer together."""
        counts: dict[str, int] = {}
        gpus: set[str] = set()
        for node in self._live_nodes():
            for profile, count in _offered(node["Resources"]).items():
                counts[profile] = counts.get(profile, 0) + count
                if node["Resources"].get("GPU"):
                    gpus.add(profile)
        return [DeviceProfile(name=name, kind="gpu" if name in gpus else "cpu", devices=count)
                for name, count in sorted(counts.items())]

    def most_on_one_node(self) -> dict[str, int]:
        """The most devices of each profile one live node offers: a worker's resources all come from one node."""
        most: dict[str, int] = {}
        for node in self._live_nodes():
            for profile, count in _offered(node["Resources"]).items():
                most[profile] = max(most.get(profile, 0), count)
        return most

    def nodes(self) -> list[dict[str, Any]]:
        """Every node the cluster knows, live or gone, with the profiles it offers (`training capacity`)."""
        return [{"node": node["NodeID"], "address": node.get("NodeManagerAddress"), "alive": bool(node["Alive"]),
                 "profiles": _offered(node["Resources"]) if node["Alive"] else {},
                 "gpus": int(node["Resources"].get("GPU", 0)) if node["Alive"] else 0}
                for node in self.ray.nodes() if _offered(node["Resources"]) or not node["Alive"]]

    def _live_nodes(self) -> list[dict[str, Any]]:
        return [node for node in self.ray.nodes() if node["Alive"]]

    # --- the executor protocol -------------------------------------------------------------------------------

    def launch(self, kind: str, job_id: str, grant: Grant) -> None:
        log_path = logs.log_path(self.log_dir, kind, job_id, grant.attempt)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**worker_environment(self.data_dir), "OPTIMIZE_LEASE_TOKEN": grant.token,
               "CUDA_VISIBLE_DEVICES": "", "PYTORCH_CUDA_ALLOC_CONF": os.environ.get(
                   "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}
        env.pop("RAY_ADDRESS", None)
        actor = self._host.options(name=actor_name(kind, job_id), lifetime="detached",
                                   **_placement(grant)).remote()
        with self._lock:
            self._launched[(kind, job_id)] = actor
        done = actor.run.remote(worker_command(kind, job_id, self.server_url), env, str(log_path),
                                grant.profile_kind == "gpu")
        threading.Thread(target=self._watch, args=(kind, job_id, grant.token, actor, done), daemon=True,
                         name=f"ray-watch-{job_id[:8]}").start()

    def alive(self, kind: str, job_id: str) -> bool:
        return self._actor(kind, job_id) is not None

    def kill(self, kind: str, job_id: str, others_go_on: bool = False) -> bool:  # its workers serve one job each
        """Stop the worker (and its actor); True once none is left, also when its node is gone."""
        actor = self._actor(kind, job_id)
        if actor is None:
            return True
        try:
            self.ray.get(actor.stop.remote(), timeout=STOP_SECONDS)
        except Exception:  # noqa: BLE001 - a dead or unreachable actor: it is killed below all the same
            pass
        self.ray.kill(actor, no_restart=True)
        return True

    def reattach(self, kind: str, job_id: str, token: str) -> None:
        actor = self._actor(kind, job_id)
        if actor is None:
            return
        with self._lock:
            self._launched[(kind, job_id)] = actor
        threading.Thread(target=self._watch, args=(kind, job_id, token, actor, actor.wait.remote()),
                         daemon=True, name=f"ray-adopt-{job_id[:8]}").start()

    def shutdown(self, keep: set[str]) -> None:
        self.stopping = True
        with self._lock:
            launched = list(self._launched.items())
        for (kind, job_id), _actor in launched:
            if kind not in keep:
                self.kill(kind, job_id)

    # ---------------------------------------------------------------------------------------------------------

    def _actor(self, kind: str, job_id: str):
        try:
            return self.ray.get_actor(actor_name(kind, job_id), namespace=NAMESPACE)
        except ValueError:  # no live actor of that name
            return None

    def _watch(self, kind: str, job_id: str, token: str, actor, done) -> None:
        from ray.exceptions import RayActorError

        try:
            code, log_file = self.ray.get(done)
            reason = exit_reason(code, Path(log_file))
        except RayActorError as error:
            reason = f"its Ray actor died ({_why(error)})"
        except Exception as error:  # noqa: BLE001 - whatever Ray raises, the worker is gone
            reason = f"its Ray task failed ({type(error).__name__}: {error})"
        with self._lock:
            if self._launched.get((kind, job_id)) is actor:
                del self._launched[(kind, job_id)]
        try:
            self.ray.kill(actor, no_restart=True)  # a detached actor outlives its work unless killed
        except Exception:  # noqa: BLE001 - already gone with its node
            pass
        try:
            self.on_exit(kind, job_id, token, reason)
        except Exception:  # noqa: BLE001 - a watcher thread must never die silently
            log.exception("recording the end of worker %s failed", job_id)


def _offered(resources: dict[str, float]) -> dict[str, int]:
    return {key[len(RESOURCE):]: int(value) for key, value in resources.items()
            if key.startswith(RESOURCE) and not key.endswith(SERVING_SUFFIX)}


def _placement(grant: Grant) -> dict[str, Any]:
    """The Ray resources of a grant: a unit of its profile's resource per device (the serving resource for a cpu
    profile's serving slots), and the GPUs themselves on a gpu profile."""
    if not grant.devices:
        return {}
    profile = grant.devices[0].split(":", 1)[0]
    serving = grant.profile_kind == "cpu" and ":serving:" in grant.devices[0]
    resource = f"{RESOURCE}{profile}{SERVING_SUFFIX if serving else ''}"
    placement: dict[str, Any] = {"resources": {resource: float(len(grant.devices))}}
    if grant.profile_kind == "gpu":
        placement["num_gpus"] = len(grant.devices)
    return placement


def _why(error: Exception) -> str:
    """Ray's words for a dead actor, shortened: its node lost, or its process gone (the node unreachable)."""
    text = " ".join(str(error).split())
    lowered = text.lower()
    if "node" in lowered and ("died" in lowered or "dead" in lowered):
        return "its node was lost"
    if "unavailable" in lowered or "socket closed" in lowered:
        return "its node or its process cannot be reached"
    return text[:300] if text else type(error).__name__


class WorkerHost:
    """The Ray actor that runs one worker process on its node and reports how it ended."""

    def __init__(self) -> None:
        self.process = None
        self.log_file = ""
        self._started = threading.Event()

    def run(self, command: list[str], env: dict[str, str], log_path: str, gpus: bool) -> tuple[int | None, str]:
        import subprocess

        import ray

        context = ray.get_runtime_context()
        if gpus:
            env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in ray.get_gpu_ids())}
        cache = Path(env["OPTIMIZE_WORKER_CACHE"])
        if not cache.parent.is_dir():  # a node that does not share the server's data dir keeps its own cache
            env["OPTIMIZE_WORKER_CACHE"] = str(Path(tempfile.gettempdir()) / "optimize-worker-cache")
        path = Path(log_path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            path = Path(tempfile.gettempdir()) / "optimize-logs" / path.name
            path.parent.mkdir(parents=True, exist_ok=True)
        self.log_file = str(path)
        with path.open("ab") as sink:
            sink.write(f"on Ray node {context.get_node_id()}\n".encode())
            sink.flush()
            self.process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                            preexec_fn=_end_with_parent)
        self._started.set()
        return self.process.wait(), self.log_file

    def wait(self) -> tuple[int | None, str]:
        """How the worker ended, for a server that reattached to it."""
        self._started.wait()
        return self.process.wait(), self.log_file

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_SECONDS)


def _end_with_parent() -> None:
    """In the worker process before it starts: it gets SIGKILL when the actor dies (its node lost, or killed)."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
