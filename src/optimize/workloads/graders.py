"""A grader checked where work that grades is submitted — an evaluation's `--grader`, a distillation's
`--accept-grader` — before any device is claimed: its spelling (`optimize.scoring.graders`), an `http:` grader's
host against the hosts this server may call, and a `bundle:` grader's bundle resolved to its exact version and its
module imported in the sandbox, through the server's pool for user code."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from optimize.core import user_code
from optimize.core.errors import NotFound, Refused
from optimize.core.settings import outbound_hosts
from optimize.deployment import Deployment
from optimize.registry.bundles import resolve_bundle
from optimize.scoring import BundleRunner
from optimize.scoring.graders import parse_bundle_grader, parse_grader


def check_grader(spec: str | None) -> str:
    """The grader a request names, as it is spelled (a `bundle:` grader's reference is resolved by
    `resolve_bundle_grader`); an http grader's host must be one this server may call."""
    grader = parse_grader(spec)
    if grader.startswith("http:"):
        _check_outbound(grader.removeprefix("http:"))
    return grader


def resolve_bundle_grader(deployment: Deployment, grader: str, project: str | None) -> tuple[str, dict[str, str]]:
    """A `bundle:` grader as the work keeps it, `bundle:NS/NAME:vN#MODULE:FUNCTION` (the exact version, so a moved
    alias changes no accepted work), and its bundle (reference and archive digest, what the worker downloads). The
    module is imported and the function looked up now, in a separate limited process waited for from the server's
    pool for user code (counted against the token and `project`), so a bundle that cannot score is refused before
    any device is claimed."""
    bundle = parse_bundle_grader(grader)
    with deployment.store.transaction() as session:
        try:
            reference, sha256 = resolve_bundle(session, bundle.reference)
        except NotFound as error:
            raise NotFound(f"grader {grader!r} needs a scoring bundle the registry does not hold: {error.message}",
                           hint=error.hint, **error.details) from None
    bundle = bundle.resolved(reference, sha256)
    archive = deployment.blobs.held_path(sha256, f"the archive sha256:{sha256} of scoring bundle {reference}")
    user_code.call(f"bundle grader check {reference}", _import_check, archive,
                   bundle.target, reference, project=project)
    return bundle.text, {"reference": reference, "sha256": sha256}


def _import_check(archive, target: str, label: str) -> None:
    with BundleRunner(archive, target, label=label):
        pass  # entering checks the module imports and defines the function


def _check_outbound(url: str) -> None:
    """An `http:` grader's rows go to its host: only to hosts the operator allows (loopback included)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    allowed = outbound_hosts()
    if host in allowed or (parts.port is not None and f"{host}:{parts.port}" in allowed):
        return
    named = ", ".join(sorted(allowed)) if allowed else "none"
    raise Refused(f"the http grader would send rows to {host}, which this server may not call (allowed hosts: "
                  f"{named})", hint="an operator adds the host to OPTIMIZE_OUTBOUND_HOSTS (e.g. "
                                    f"OPTIMIZE_OUTBOUND_HOSTS={host}) and restarts the server")


@dataclass(frozen=True)
class Grader:
    """A request's grader as the work keeps it, checked before any transaction: a `bundle:` grader's bundle
    resolved to its exact version and its module imported in the sandbox (user code, waited for outside the
    store's transactions)."""

    text: str
    bundle: dict[str, str] | None = None


def prepare_grader(deployment: Deployment, spec: str | None, project: str | None) -> Grader:
    """`check_grader`, and a `bundle:` grader resolved and import-checked (`resolve_bundle_grader`)."""
    grader = check_grader(spec)
    if not grader.startswith("bundle:"):
        return Grader(grader)
    return Grader(*resolve_bundle_grader(deployment, grader, project))
