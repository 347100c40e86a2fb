"""The pre-flight estimate a run records before it claims devices: the steps, tokens and training time that the
analysis of its training dataset and the catalog's measured throughput predict (`workloads.estimates`, the same
figures `datasets analyze -f RUN_FILE` shows, scaled by this deployment's runs of the same shape:
`workloads.throughput`), kept on the run so `runs get` shows it against the time measured
and a follower's ETA has a basis before the first step.

A run records it at submission where the analysis is already done, otherwise when its length check settles
before the claim; where no analysis is done by then, the record says so instead of inventing a figure.
"""

from __future__ import annotations

from typing import Any

from optimize.core.clock import iso, utcnow
from optimize.core.flops import utilisation
from optimize.schemas.phases import AnalysisPhase
from optimize.schemas.plans import RunPlan, parse_plan
from optimize.store.tables import Run
from optimize.training.admission.lengths import analysis_for
from optimize.workloads.estimates import estimate
from optimize.workloads.lengths import lengths_file
from optimize.workloads.throughput import estimate_scaled

NO_ANALYSIS = ("no analysis of the training dataset was done before the run claimed its devices, so there is no "
               "estimate")
PREPARED = ("the training dataset holds prepared token rows, which no analysis measures (their version records only "
            "the longest row), so there is no estimate")


def predict(blobs, session, plan: RunPlan, entry, dataset_digest: str,
            commit: str | None, packing: bool | None) -> dict[str, Any] | None:
    """The estimate from the training dataset's finished analysis, or None while there is none; `packing` is the
    run's resolved `config.packing`."""
    analysis = analysis_for(session, blobs, dataset_digest, commit) if commit else None
    if analysis is None or analysis.phase != AnalysisPhase.DONE or not analysis.lengths_sha256:
        return None
    lengths = lengths_file(blobs, analysis.id, analysis.lengths_sha256)
    figures = estimate_scaled(session, estimate(analysis.report, lengths, plan, entry, bool(packing)), plan,
                              entry.id)
    return {"seconds": figures["seconds"], "steps": figures["steps"], "tokens": figures["tokens"],
            "basis": figures["basis"], "packing": figures["packing"], "analysisId": analysis.id,
            "recordedAt": iso(utcnow()),
            "unscaledSeconds": figures["unscaledSeconds"], "scale": figures["scale"]}


def expected_mfu(prediction: dict[str, Any] | None, entry, accelerator: str | None, devices: int,
                 adapter: str = "lora") -> dict[str, Any] | None:
    """The MFU the estimate's tokens/s would reach on the profile's accelerator (4N a token of a LoRA or qlora run,
    6N of a full fine-tune's), its N the parameters a token is computed with (an MoE's active ones); None without an
    estimate or a known peak."""
    if not prediction or not prediction.get("seconds") or not prediction.get("tokens") or not accelerator:
        return None
    parameters = entry.parameters.active or entry.parameters.total or 0
    found = utilisation(parameters, prediction["tokens"] / prediction["seconds"] / max(1, devices), accelerator,
                        adapter)
    return found.to_json() if found else None


def unavailable(prepared: bool = False) -> dict[str, Any]:
    """No estimate, and why: no analysis was done, or the training rows are prepared token rows."""
    return {"seconds": None, "steps": None, "tokens": None, "basis": PREPARED if prepared else NO_ANALYSIS,
            "analysisId": None, "recordedAt": iso(utcnow()), "unscaledSeconds": None, "scale": None}


def settle(deployment, session, run: Run) -> None:
    """Record the run's estimate once its length check no longer waits (before its devices are claimed): the plan
    the run stored, read again only here, where its estimate was not recorded at submission."""
    if run.prediction is not None:
        return
    entry = deployment.catalog.find(run.base_entry_id)
    training = next((d for d in (run.length_check or {}).get("datasets") or [] if d.get("role") == "training"), {})
    run.prediction = predict(deployment.blobs, session, parse_plan(run.plan), entry, run.dataset_digest,
                             run.base_commit, run.resolved["config"].get("packing")
                             ) or unavailable(training.get("status") == "prepared")


def prediction_json(run: Run, training_millis: int | None) -> dict[str, Any] | None:
    """The recorded estimate with the training time measured so far (`actualSeconds`, null before training)."""
    if run.prediction is None:
        return None
    actual = training_millis / 1000 if training_millis is not None else None
    return {**run.prediction, "actualSeconds": actual}
