"""`GET /metrics`: the deployment's state in Prometheus' text format (version 0.0.4), for a scraper holding a token
that is not limited to projects or namespaces (it sees every project's figures).

- `optimize_jobs{kind,phase}`: jobs of each kind of the kernel's registry (runs, analyses, evaluations, endpoints)
  by phase;
- `optimize_devices{profile,pool,state}`: the scheduler's devices, free or granted, and `optimize_devices_queued`
  (devices that queued runs wait for);
- for each READY endpoint, what its worker last reported: requests served (a counter from the worker's start),
  in flight and queued, tokens generated (a counter), tokens/s over the last minute, and the latency quantiles
  0.5 and 0.95 over the last minute.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from optimize.deployment import Deployment
from optimize.jobs.counts import phase_counts
from optimize.serving.phases import EndpointPhase
from optimize.store.tables import Endpoint
from optimize.training.server.capacity import capacity

ENDPOINT_SERIES = (  # (metric, type, help, load key)
    ("optimize_endpoint_requests_served_total", "counter", "Requests an endpoint finished since its worker started",
     "served"),
    ("optimize_endpoint_requests_in_flight", "gauge", "Requests decoding in an endpoint's batch", "inFlight"),
    ("optimize_endpoint_requests_queued", "gauge", "Requests waiting for a row of an endpoint's batch", "queued"),
    ("optimize_endpoint_tokens_generated_total", "counter", "Tokens an endpoint generated since its worker started",
     "tokens"),
    ("optimize_endpoint_tokens_per_second", "gauge", "Tokens an endpoint generated per second over the last minute",
     "tokensPerSecond"),
)


def metrics_text(deployment: Deployment) -> str:
    lines: list[str] = []

    def family(name: str, kind: str, text: str, samples: list[tuple[dict[str, Any], float]]) -> None:
        lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}"])
        lines.extend(f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples)

    with deployment.store.transaction() as session:
        jobs = [({"kind": kind, "phase": phase}, count)
                for kind, phases in phase_counts(session).items() for phase, count in phases.items()]
        ready = session.scalars(select(Endpoint).where(Endpoint.phase == EndpointPhase.READY.value)
                                .order_by(Endpoint.created_at)).all()
        endpoints = [({"endpoint": e.id, "project": e.project, "model": e.base["baseEntryId"]}, e.load or {})
                     for e in ready]
    family("optimize_jobs", "gauge", "Jobs by kind and phase", jobs)
    pools = capacity(deployment).pools
    family("optimize_devices", "gauge", "Devices by profile, pool and state (free or granted)",
           [({"profile": p.profile, "pool": p.pool, "state": state}, getattr(p, state))
            for p in pools for state in ("free", "granted")])
    family("optimize_devices_queued", "gauge", "Devices that queued runs wait for, by profile",
           [({"profile": p.profile, "pool": p.pool}, p.queued) for p in pools])
    for name, kind, text, key in ENDPOINT_SERIES:
        family(name, kind, text, [(labels, load[key]) for labels, load in endpoints if key in load])
    family("optimize_endpoint_latency_seconds", "gauge",
           "A request's time from submission to its end over the last minute, by quantile",
           [({**labels, "quantile": quantile}, load[key]) for labels, load in endpoints
            for quantile, key in (("0.5", "latencyP50Seconds"), ("0.95", "latencyP95Seconds"))
            if load.get(key) is not None])
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, Any]) -> str:
    escaped = (f'{key}="{str(value).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
               for key, value in labels.items())
    return "{" + ",".join(escaped) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
