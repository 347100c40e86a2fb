"""The Optimize API as typed calls, grouped by resource: `api.runs.get(run)`, `api.datasets.versions(reference)`, …

Every URL of the public API the CLI reaches is spelled in this module and nowhere else, so a renamed route is one
edit here and tests/unit/test_client_routes.py checks each of them against the server's OpenAPI document. Each
user-given path part goes through `segment`: a name holding `/` or `?` can never change the route.

Answers come back as the server sent them (the decoded JSON object, unchanged): `-o json` prints exactly what the
server said, and the text renderers read the same dicts. `OptimizeClient` (http.py) stays the transport: retries,
timeouts and turning refusals into `ApiError` are its business, not this module's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

from optimize.client import events
from optimize.client.http import OptimizeClient, segment

if TYPE_CHECKING:  # only named in annotations: parsing references is the caller's work, and costs start-up time
    from optimize.core.refs import Reference

Json = dict[str, Any]
"""A JSON object as the server answered it."""

# The OpenAI-compatible route the server answers for every endpoint (the model picked by name); the local proxy of
# `akka training endpoints proxy` serves the same path, so OpenAI clients need only a different base URL.
OPENAI_CHAT_COMPLETIONS = "/v1/chat/completions"


class Reply(NamedTuple):
    """An answer with its HTTP status, for operations whose status says more than the body does (200: it already
    was so; 202: done now)."""

    answer: Json
    status: int


def _dry_run(dry_run: bool) -> dict[str, str] | None:
    return {"dryRun": "true"} if dry_run else None


def _given(**values: Any) -> dict[str, Any]:
    """The filters that were set; an unset one (None, False, empty) is left out, since the server's default for it
    already means "any"."""
    return {name: value for name, value in values.items() if value}


class _Resource:
    ROOT = ""  # the resource's collection

    def __init__(self, http: OptimizeClient) -> None:
        self._http = http

    def _path(self, item: str, action: str = "") -> str:
        """One item of the collection (its id or name escaped), or one of its actions."""
        return f"{self.ROOT}/{segment(item)}" + (f"/{action}" if action else "")

    def _logs(self, item: str, attempt: int | None, offset: int) -> Json:
        """`GET …/{id}/logs` of a job kind's collection: a chunk of one attempt's worker log from byte `offset`."""
        return self._http.get(self._path(item, "logs"), params={"offset": offset, **_given(attempt=attempt)})


class Runs(_Resource):
    """Training runs, their branches and their event streams."""

    ROOT = "/v1/training/runs"

    def start(self, plan: Json, *, dry_run: bool = False) -> Json:
        """Submit a run plan; with `dry_run`, check everything a submission checks and start nothing."""
        if dry_run:
            return self._http.post(self.ROOT, json=plan, params=_dry_run(True))
        # A plan with a submissionId may be sent again when the answer is lost: a repeat reaches the same run.
        return self._http.post(self.ROOT, json=plan, retries=3 if "submissionId" in plan else None)

    def get(self, run: str, *, settings: bool = False) -> Json:
        return self._http.get(self._path(run), params={"settings": "true"} if settings else None)

    def list(self, *, project: str | None = None, phase: str | None = None, archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params=_given(project=project, phase=phase, archived=archived))

    def annotate(self, run: str, *, description: str | None = None, config_name: str | None = None) -> Json:
        """Set the run's description and its column in the scores tables; None leaves one as it is, an empty string
        clears it."""
        body = {"description": description, "configName": config_name}
        return self._http.patch(self._path(run), json={k: v for k, v in body.items() if v is not None})

    def metrics(self, run: str, *, limit: int | None = None) -> Json:
        return self._http.get(self._path(run, "metrics"), params=_given(limit=limit))

    def compare(self, run: str, *, baseline: str, window: int | None = None, spike_factor: float | None = None,
                margin: float | None = None, across_plans: bool = False, align: str | None = None) -> Json:
        """Two sft runs' training losses, window by window (the server's defaults where a setting is None)."""
        params = {"baseline": baseline, **_given(window=window, acrossPlans=across_plans, align=align)}
        for name, value in (("spikeFactor", spike_factor), ("margin", margin)):
            if value is not None:  # 0 is a margin of its own
                params[name] = value
        return self._http.get(self._path(run, "compare"), params=params)

    def hparams(self, run: str, *, against: str | None = None) -> Json:
        """The run's flattened hyperparameters and their sha; with `against`, where another run's differ."""
        return self._http.get(self._path(run, "hparams"), params=_given(against=against))

    def rollouts(self, run: str, *, step: int | None = None) -> Json:
        """A grpo or gspo run's sampled rollouts at `step` (default: the newest update recorded)."""
        return self._http.get(self._path(run, "rollouts"), params={} if step is None else {"step": step})

    def snapshots(self, run: str) -> Json:
        return self._http.get(self._path(run, "snapshots"))

    def pause(self, run: str, *, checkpoint: str) -> Reply:
        """200: the run was already pausing; 202: it pauses now."""
        return Reply(*self._http.request_with_status("POST", self._path(run, "pause"),
                                                     json={"checkpoint": checkpoint}))

    def resume(self, run: str) -> Json:
        return self._http.post(self._path(run, "resume"))

    def cancel(self, run: str) -> Reply:
        """200: the run was already cancelled; 202: it is cancelled now."""
        return Reply(*self._http.request_with_status("POST", self._path(run, "cancel")))

    def follow(self, run: str, deadline: float | None = None) -> Iterator[Json]:
        """Each status the run's event stream sends, until it settles (see `events.follow`)."""
        return events.follow(self._http, self._path(run, "events"), deadline)

    def logs(self, run: str, *, attempt: int | None = None, offset: int = 0) -> Json:
        """A chunk of the worker's log of one attempt (default: the newest) from byte `offset`; ask again from its
        `nextOffset` for more."""
        return self._logs(run, attempt, offset)

    def branch(self, parent: str, *, snapshot_id: str | None = None, restore_mode: str = "auto",
               overrides: Json | None = None, max_steps: int | None = None, epochs: int | None = None,
               dry_run: bool = False) -> Json:
        """A child run from one of the parent's snapshots, with the parent's settings and `overrides` over them."""
        body = {"snapshotId": snapshot_id, "restoreMode": restore_mode, "overrides": overrides,
                "maxSteps": max_steps, "epochs": epochs}
        return self._http.post(self._path(parent, "branch"), json=body, params=_dry_run(dry_run))

    def continue_(self, parent: str, *, steps: int, snapshot_id: str | None = None, overrides: Json | None = None,
                  dry_run: bool = False) -> Json:
        """A trainingState branch of `steps` more updates (`continue` is a Python keyword)."""
        body = {"snapshotId": snapshot_id, "steps": steps, "overrides": overrides}
        return self._http.post(self._path(parent, "continue"), json=body, params=_dry_run(dry_run))

    def sweep(self, parent: str, *, grid: Json, snapshot_id: str | None = None, restore_mode: str = "auto",
              dry_run: bool = False) -> Json:
        """One branch per point of the grid; every point is checked before any starts."""
        body = {"grid": grid, "snapshotId": snapshot_id, "restoreMode": restore_mode}
        return self._http.post(self._path(parent, "sweep"), json=body, params=_dry_run(dry_run))

    def branches(self, run: str, *, recursive: bool = False) -> Json:
        """The run's direct children, or with `recursive` every descendant."""
        return self._http.get(self._path(run, "branches"), params={"recursive": "true"} if recursive else None)

    def ancestry(self, run: str) -> Json:
        return self._http.get(self._path(run, "ancestry"))


class Snapshots(_Resource):
    """Committed saves of runs."""

    ROOT = "/v1/training/snapshots"

    def get(self, snapshot: str) -> Json:
        return self._http.get(self._path(snapshot))

    def register(self, snapshot: str, *, name: str | None = None) -> Json:
        """Register the snapshot's adapter weights as a model version (`name`: default, the run's)."""
        return self._http.post(self._path(snapshot, "register"), json={"name": name})

    def pin(self, snapshot: str, *, kinds: list[str] | None = None) -> Json:
        """Hold `kinds` (default: every kind) against retention."""
        return self._http.post(self._path(snapshot, "pin"), json={"kinds": kinds or None})

    def unpin(self, snapshot: str, *, kinds: list[str] | None = None) -> Json:
        return self._http.post(self._path(snapshot, "unpin"), json={"kinds": kinds or None})


class Evaluations(_Resource):
    """Evaluations: a model answers a dataset's prompts, a grader scores the answers."""

    ROOT = "/v1/training/evaluations"

    def start(self, *, model: str, dataset: str, grader: str = "json-label-match", project: str | None = None,
              max_new_tokens: int | None = None, grader_instructions: str | None = None,
              generations: int | None = None, temperature: float | None = None, seed: int | None = None,
              rows: int | None = None, device_profile: str | None = None,
              response_schema: Json | None = None) -> Json:
        body = {"model": model, "dataset": dataset, "grader": grader, "project": project,
                "maxNewTokens": max_new_tokens, "graderInstructions": grader_instructions,
                **{name: value for name, value in (("generations", generations), ("temperature", temperature),
                                                   ("seed", seed), ("rows", rows), ("deviceProfile", device_profile),
                                                   ("responseSchema", response_schema))
                   if value is not None}}
        return self._http.post(self.ROOT, json=body)

    def get(self, evaluation: str) -> Json:
        return self._http.get(self._path(evaluation))

    def list(self, *, project: str | None = None, model: str | None = None, phase: str | None = None,
             archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params=_given(project=project, model=model, phase=phase, archived=archived))

    def cancel(self, evaluation: str) -> Json:
        return self._http.post(self._path(evaluation, "cancel"))

    def retry(self, evaluation: str) -> Json:
        return self._http.post(self._path(evaluation, "retry"))

    def predictions(self, evaluation: str, *, limit: int | None = None) -> Json:
        return self._http.get(self._path(evaluation, "predictions"), params=_given(limit=limit) or None)

    def follow(self, evaluation: str, deadline: float | None = None) -> Iterator[Json]:
        return events.follow(self._http, self._path(evaluation, "events"), deadline)

    def logs(self, evaluation: str, *, attempt: int | None = None, offset: int = 0) -> Json:
        """A chunk of the worker's log of one attempt (default: the newest) from byte `offset`."""
        return self._logs(evaluation, attempt, offset)


class Comparisons(_Resource):
    """Comparisons: a source snapshot's model and candidates scored on one dataset and grader, the winner named."""

    ROOT = "/v1/training/comparisons"

    def create(self, *, source: str, dataset: str, candidates: list[str] | None = None,
               branches: list[str] | None = None, all_branches: list[str] | None = None, grader: str | None = None,
               grader_instructions: str | None = None, max_new_tokens: int | None = None,
               device_profile: str | None = None, promote: str | None = None, margin: float | None = None) -> Json:
        """Create a comparison; only the settings given are sent (the server fills in its defaults)."""
        body = {"source": source, "dataset": dataset, "candidates": candidates or [], "branches": branches or [],
                "allBranches": all_branches or [],
                **_given(grader=grader, graderInstructions=grader_instructions, maxNewTokens=max_new_tokens,
                         deviceProfile=device_profile, promote=promote, margin=margin)}
        return self._http.post(self.ROOT, json=body)

    def get(self, comparison: str) -> Json:
        return self._http.get(self._path(comparison))

    def list(self, *, project: str | None = None, phase: str | None = None) -> Json:
        return self._http.get(self.ROOT, params=_given(project=project, phase=phase))

    def cancel(self, comparison: str) -> Json:
        return self._http.post(self._path(comparison, "cancel"))

    def row(self, comparison: str, line: int) -> Json:
        """Every compared model's answer to one line of the dataset."""
        return self._http.get(self._path(comparison, f"rows/{line:d}"))

    def follow(self, comparison: str, deadline: float | None = None) -> Iterator[Json]:
        return events.follow(self._http, self._path(comparison, "events"), deadline)


class Pipelines(_Resource):
    """Pipelines: stages of runs, evaluations and distillations in one plan."""

    ROOT = "/v1/training/pipelines"

    def start(self, document: Json, *, dry_run: bool = False, show_resolved: bool = False) -> Json:
        return self._http.post(self.ROOT, json=document,
                               params=_given(dryRun="true" if dry_run else None,
                                             showResolved="true" if show_resolved else None) or None)

    def get(self, pipeline: str) -> Json:
        return self._http.get(self._path(pipeline))

    def list(self, *, project: str | None = None, phase: str | None = None) -> Json:
        return self._http.get(self.ROOT, params=_given(project=project, phase=phase))

    def cancel(self, pipeline: str) -> Json:
        return self._http.post(self._path(pipeline, "cancel"))

    def resume(self, pipeline: str) -> Json:
        return self._http.post(self._path(pipeline, "resume"))

    def follow(self, pipeline: str, deadline: float | None = None) -> Iterator[Json]:
        return events.follow(self._http, self._path(pipeline, "events"), deadline)


class Distillations(_Resource):
    """Distillations: a teacher answers a chat dataset's decisions; the accepted answers become a dataset version."""

    ROOT = "/v1/training/distillations"

    def create(self, *, teacher: str, source: str, target: str, project: str | None = None,
               replicas: int | None = None, max_tokens: int | None = None, max_model_length: int | None = None,
               temperature: float | None = None, top_p: float | None = None, seed: int | None = None,
               smoke: str | None = None, thinking: bool | None = None, device_profile: str | None = None,
               acceptance_floor: float | None = None, instructions: str | None = None,
               accept_grader: str | None = None, min_score: float | None = None,
               submission_id: str | None = None, response_schema: Json | None = None) -> Json:
        """Start a distillation; only the settings given are sent (the server fills in its defaults)."""
        return self._http.post(self.ROOT, json=distillation_body(
            teacher=teacher, source=source, target=target, project=project, replicas=replicas,
            max_tokens=max_tokens, max_model_length=max_model_length, temperature=temperature, top_p=top_p,
            seed=seed, smoke=smoke, thinking=thinking, device_profile=device_profile,
            acceptance_floor=acceptance_floor, instructions=instructions, accept_grader=accept_grader,
            min_score=min_score, submission_id=submission_id, response_schema=response_schema))

    def get(self, distillation: str) -> Json:
        return self._http.get(self._path(distillation))

    def list(self, *, project: str | None = None, phase: str | None = None, archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params=_given(project=project, phase=phase, archived=archived))

    def pause(self, distillation: str) -> Json:
        return self._http.post(self._path(distillation, "pause"))

    def resume(self, distillation: str) -> Json:
        return self._http.post(self._path(distillation, "resume"))

    def cancel(self, distillation: str) -> Json:
        return self._http.post(self._path(distillation, "cancel"))

    def rejections(self, distillation: str, *, reason: str | None = None, limit: int | None = None) -> Json:
        """The rejected answers by decision (the first `limit`; only those rejected for `reason`)."""
        return self._http.get(self._path(distillation, "rejections"),
                              params=_given(reason=reason, limit=limit) or None)

    def follow(self, distillation: str, deadline: float | None = None) -> Iterator[Json]:
        return events.follow(self._http, self._path(distillation, "events"), deadline)

    def logs(self, distillation: str, *, attempt: int | None = None, offset: int = 0) -> Json:
        """A chunk of the worker's log of one attempt (default: the newest) from byte `offset`."""
        return self._logs(distillation, attempt, offset)


def distillation_body(*, teacher: str, source: str, target: str, project: str | None = None,
                      replicas: int | None = None, max_tokens: int | None = None,
                      max_model_length: int | None = None, temperature: float | None = None,
                      top_p: float | None = None, seed: int | None = None, smoke: str | None = None,
                      thinking: bool | None = None, device_profile: str | None = None,
                      acceptance_floor: float | None = None, instructions: str | None = None,
                      accept_grader: str | None = None, min_score: float | None = None,
                      submission_id: str | None = None, response_schema: Json | None = None) -> Json:
    """The body of `POST /v1/training/distillations`, camelCase as on the wire: the settings left None are left
    out (a 0 or a False given is sent)."""
    given = {"project": project, "teacher": teacher, "source": source, "target": target, "replicas": replicas,
             "maxTokens": max_tokens, "maxModelLength": max_model_length, "temperature": temperature,
             "topP": top_p, "seed": seed, "smoke": smoke, "thinking": thinking, "deviceProfile": device_profile,
             "acceptanceFloor": acceptance_floor, "instructions": instructions, "acceptGrader": accept_grader,
             "minScore": min_score, "submissionId": submission_id, "responseSchema": response_schema}
    return {key: value for key, value in given.items() if value is not None}

class Curations(_Resource):
    """Curations: a judge model scores a project's session candidates; the kept ones become a dataset version."""

    ROOT = "/v1/training/curations"

    def apply(self, request: Json) -> Reply:
        """Start the curation a request document describes (202), or reach the one its curationId already names
        (200); a request with a curationId may be sent again when the answer is lost."""
        answer = self._http.request_with_status("POST", self.ROOT, json=request,
                                                retries=3 if "curationId" in request else None)
        return Reply(*answer)

    def get(self, curation: str) -> Json:
        return self._http.get(self._path(curation))

    def list(self, *, project: str | None = None, phase: str | None = None, archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params=_given(project=project, phase=phase, archived=archived))

    def cancel(self, curation: str) -> Json:
        return self._http.post(self._path(curation, "cancel"))

    def rejections(self, curation: str, *, reason: str | None = None, limit: int | None = None) -> Json:
        """The rejected candidates in order (the first `limit`; only those rejected for `reason`)."""
        return self._http.get(self._path(curation, "rejections"), params=_given(reason=reason, limit=limit) or None)

    def follow(self, curation: str, deadline: float | None = None) -> Iterator[Json]:
        return events.follow(self._http, self._path(curation, "events"), deadline)

    def logs(self, curation: str, *, attempt: int | None = None, offset: int = 0) -> Json:
        """A chunk of the worker's log of one attempt (default: the newest) from byte `offset`."""
        return self._logs(curation, attempt, offset)


class Endpoints(_Resource):
    """Endpoints serving a base model and its adapters over an OpenAI-compatible API."""

    ROOT = "/v1/training/endpoints"

    def create(self, *, model: str, project: str | None = None, device_profile: str | None = None) -> Json:
        """Serve `model`; a candidate whose base model an active endpoint of the project serves attaches to it."""
        body = {"model": model, "project": project, "deviceProfile": device_profile}
        return self._http.post(self.ROOT, json={k: v for k, v in body.items() if v is not None})

    def get(self, endpoint: str) -> Json:
        return self._http.get(self._path(endpoint))

    def list(self, *, project: str | None = None, phase: str | None = None, model: str | None = None,
             archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params=_given(project=project, phase=phase, model=model, archived=archived))

    def follow(self, endpoint: str, deadline: float | None = None) -> Iterator[Json]:
        return events.follow(self._http, self._path(endpoint, "events"), deadline)

    def logs(self, endpoint: str, *, attempt: int | None = None, offset: int = 0) -> Json:
        """A chunk of the worker's log of one attempt (default: the newest) from byte `offset`."""
        return self._logs(endpoint, attempt, offset)

    def chat(self, endpoint: str, *, model: str, messages: list[Json], temperature: float | None = None,
             max_tokens: int | None = None) -> Json:
        """One chat completion from one of the endpoint's models, answered as OpenAI's API answers it."""
        body = {"model": model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens}
        return self._http.post(self._path(endpoint, "chat/completions"),
                               json={k: v for k, v in body.items() if v is not None})

    def chat_url(self, endpoint: str) -> str:
        """The full URL of the endpoint's chat completions, for the local proxy, which POSTs to it with a client of
        its own (its answers stream through as they come)."""
        return self._http.base_url + self._path(endpoint, "chat/completions")

    def detach(self, endpoint: str, *, model: str) -> Json:
        """Stop serving one attached adapter; the endpoint goes on serving its other models."""
        return self._http.post(self._path(endpoint, "detach"), json={"model": model})

    def disable(self, endpoint: str, *, model: str) -> Json:
        """Requests for `model` (the base model or an attached adapter) through the server are answered 409 until
        it is enabled; the endpoint keeps its device and the model stays loaded."""
        return self._http.post(self._path(endpoint, "disable"), json={"model": model})

    def enable(self, endpoint: str, *, model: str) -> Json:
        """Undo `disable`: the model answers through the server again."""
        return self._http.post(self._path(endpoint, "enable"), json={"model": model})

    def info(self) -> Json:
        """What endpoints here can do: idle timeout, adapters at once, devices, engine, tool-call parsers."""
        return self._http.get(f"{self.ROOT}/info")

    def delete(self, endpoint: str) -> Json:
        return self._http.request("DELETE", self._path(endpoint))


class Projects(_Resource):
    """Training projects; a project's name is the registry namespace of its models."""

    ROOT = "/v1/training/projects"

    def create(self, name: str, *, description: str | None = None) -> Json:
        return self._http.post(self.ROOT, json={"name": name, "description": description})

    def get(self, name: str) -> Json:
        return self._http.get(self._path(name))

    def list(self, *, archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params={"archived": archived})

    def archive(self, name: str) -> Json:
        return self._http.post(self._path(name, "archive"))

    def unarchive(self, name: str) -> Json:
        return self._http.post(self._path(name, "unarchive"))

    def scores(self, name: str, *, dataset: str | None = None, grader: str | None = None) -> Json:
        """The base model's score and one column per training configuration, for one dataset and grader."""
        return self._http.get(self._path(name, "scores"), params=_given(dataset=dataset, grader=grader))

    def set_evaluation(self, name: str, *, dataset: str, grader: str | None = None,
                       grader_instructions: str | None = None) -> Json:
        """The project's standing evaluation: every model version it registers from now on is evaluated on
        `dataset` with `grader` (the server's default when None), started by the server."""
        return self._http.put(self._path(name, "evaluation"), json={
            "dataset": dataset, "grader": grader, "graderInstructions": grader_instructions})

    def clear_evaluation(self, name: str) -> Json:
        """No standing evaluation: new model versions are no longer evaluated by themselves."""
        return self._http.request("DELETE", self._path(name, "evaluation"))


class BaseModels(_Resource):
    """The base-model catalog this deployment applies."""

    ROOT = "/v1/training/base-models"

    def list(self) -> Json:
        return self._http.get(self.ROOT)

    def get(self, model: str) -> Json:
        return self._http.get(self._path(model))

    def select(self, model: str, *, from_dir: str | None = None, revision: str | None = None) -> Json:
        """Make a base model available; `from_dir` imports a snapshot folder the server reads (an absolute path);
        `revision` fetches that hub branch, tag or commit of a model whose catalog entry pins none."""
        body: Json = {}
        if from_dir:
            body["from"] = from_dir
        if revision:
            body["revision"] = revision
        return self._http.post(self._path(model, "select"), json=body)

    def add(self, repository: str, *, family: str | None = None) -> Json:
        """Add a hub model (`OWNER/NAME[@REV]`) to this deployment's catalog, its facts read from its files."""
        body: Json = {"repository": repository}
        if family:
            body["family"] = family
        return self._http.post(self.ROOT, json=body)


class Analyses(_Resource):
    """Dataset analyses: token lengths of a dataset's rows under a base model."""

    ROOT = "/v1/training/datasets/analyses"

    def start(self, *, dataset: str, model: str | None = None, plan: Json | None = None) -> Json:
        """Start an analysis, or read the one kept for the same examples, model commit and version; with `plan`,
        the answer estimates the run's steps and time too."""
        body: Json = {"dataset": dataset, "model": model}
        if plan is not None:
            body["plan"] = plan
        return self._http.post(self.ROOT, json=body)

    def get(self, analysis: str) -> Json:
        return self._http.get(self._path(analysis))

    def list(self, *, dataset: str) -> Json:
        """The analyses kept for a dataset version's examples."""
        return self._http.get(self.ROOT, params={"dataset": dataset})

    def logs(self, analysis: str, *, attempt: int | None = None, offset: int = 0) -> Json:
        """A chunk of the worker's log of one attempt (default: the newest) from byte `offset`."""
        return self._logs(analysis, attempt, offset)


class Tokens(_Resource):
    """API tokens (administrators) and the caller a token names."""

    ROOT = "/v1/auth/tokens"

    def create(self, name: str, *, role: str, projects: list[str] | None = None,
               namespaces: list[str] | None = None) -> Json:
        """Issue a token; the answer's `token` is shown once."""
        return self._http.post(self.ROOT, json={"name": name, "role": role, "projects": projects or None,
                                                "namespaces": namespaces or None})

    def list(self, *, revoked: bool = False) -> Json:
        return self._http.get(self.ROOT, params={"revoked": str(revoked).lower()})

    def revoke(self, token_id: str) -> Json:
        return self._http.request("DELETE", self._path(token_id))

    def whoami(self) -> Json:
        return self._http.get("/v1/auth/whoami")


class Namespaces(_Resource):
    """Registry namespaces (created by the first registration into them)."""

    ROOT = "/v1/registry/namespaces"

    def list(self, *, archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params={"archived": str(archived).lower()})

    def get(self, namespace: str) -> Json:
        return self._http.get(self._path(namespace))

    def annotate(self, namespace: str, *, description: str) -> Json:
        """Set the namespace's description; an empty one clears it."""
        return self._http.patch(self._path(namespace), json={"description": description})

    def archive(self, namespace: str) -> Json:
        return self._http.post(self._path(namespace, "archive"))

    def unarchive(self, namespace: str) -> Json:
        return self._http.post(self._path(namespace, "unarchive"))


class _Artifacts(_Resource):
    """What datasets, models and bundles share: an artifact per NS/NAME, its versions, a version by selector, its
    aliases; the bytes of what a version holds, streamed into a file."""

    def _stream_into(self, url: str, what: str, sink: BinaryIO) -> int:
        """Stream the bytes at `url` into `sink`; returns the bytes written (a refusal is raised as the server's)."""
        import httpx

        from optimize.client.http import ApiError, _decode

        written = 0
        try:
            with self._http._http.stream("GET", url) as response:
                if response.status_code != 200:
                    response.read()
                    _decode(response)  # raises the server's refusal (an unknown version or file)
                for chunk in response.iter_bytes(1024 * 1024):
                    sink.write(chunk)
                    written += len(chunk)
        except (httpx.TransportError, httpx.StreamError) as error:
            raise ApiError(f"downloading {what} from {self._http.base_url} failed ({type(error).__name__})",
                           code="unreachable", hint="download it again") from None
        return written

    def _artifact(self, reference: Reference) -> str:
        return f"{self.ROOT}/{segment(reference.namespace)}/{segment(reference.name)}"

    def get(self, reference: Reference) -> Json:
        """The version the reference names; the newest (with the version list, for models) when it names none."""
        path = self._artifact(reference)
        if reference.selector != "latest":
            path += f"/versions/{segment(reference.selector)}"
        return self._http.get(path)

    def get_alias(self, reference: Reference, alias: str) -> Json:
        """The version the alias points at, every version it pointed at before, and who moved it."""
        return self._http.get(f"{self._artifact(reference)}/aliases/{segment(alias)}")

    def set_alias(self, reference: Reference, alias: str, *, version: str) -> Json:
        """Point the alias at `version` (vN, another alias or sha256:HEX); its history is kept."""
        return self._http.put(f"{self._artifact(reference)}/aliases/{segment(alias)}", json={"version": version})


class Datasets(_Artifacts):
    """Registered datasets and their aliases."""

    ROOT = "/v1/registry/datasets"

    def list(self, *, namespace: str | None = None, archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params={"archived": str(archived).lower(), **_given(namespace=namespace)})

    def versions(self, reference: Reference) -> Json:
        return self._http.get(self._artifact(reference) + "/versions")

    def object(self, reference: Reference, path: str, sink: BinaryIO) -> int:
        """Stream one object of the version (a shard, as `get` lists its objects) into `sink`; returns the bytes."""
        url = f"{self._artifact(reference)}/versions/{segment(reference.selector)}/objects/{segment(path)}"
        return self._stream_into(url, path, sink)


class Models(_Artifacts):
    """Registered models: base models on selection, trained ones from runs."""

    ROOT = "/v1/registry/models"

    def list(self, *, namespace: str | None = None, project: str | None = None, archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params={"archived": str(archived).lower(),
                                                 **_given(namespace=namespace, project=project)})

    def versions(self, reference: Reference, *, base_model: str | None = None, produced_by_kind: str | None = None,
                 produced_by_id: str | None = None) -> Json:
        params = {"baseModel": base_model, "producedByKind": produced_by_kind, "producedById": produced_by_id}
        return self._http.get(self._artifact(reference) + "/versions",
                              params={k: v for k, v in params.items() if v is not None})

    def register(self, reference: Reference, *, snapshot: str, alias: str | None = None) -> Json:
        """Register a run's save (`snapshot`) as a version of the reference's NS/NAME (NS: the run's project)."""
        return self._http.post(self._artifact(reference) + "/versions", json={"snapshot": snapshot, "alias": alias})

    def _files(self, reference: Reference) -> str:
        return f"{self._artifact(reference)}/versions/{segment(reference.selector)}/files"

    def files(self, reference: Reference) -> Json:
        """What downloading the version writes: each file's path, sha256 and size, and the chat template."""
        return self._http.get(self._files(reference))

    def download_file(self, reference: Reference, path: str, sink: BinaryIO) -> int:
        """Stream one file of the version (its `path` as `files` lists it) into `sink`; returns the bytes written.
        The caller checks them against the listed sha256: a stream cut short or altered is not a file."""
        return self._stream_into(f"{self._files(reference)}/{segment(path)}", path, sink)


class Adapters(_Resource):
    """Adapters made elsewhere: their files sent, then imported as a model version over a selected base model
    (client/adapters.py drives an import)."""

    ROOT = "/v1/registry/adapters"

    def _artifact(self, reference: Reference) -> str:
        return f"{self.ROOT}/{segment(reference.namespace)}/{segment(reference.name)}"

    def send_file(self, reference: Reference, sha256: str, chunks: Iterator[bytes], size: int) -> Json:
        """Stream one adapter file of `size` bytes whose sha256 is `sha256` (not read when the registry holds it)."""
        headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
        return self._http.request("PUT", f"{self._artifact(reference)}/files/{segment(sha256)}", content=chunks,
                                  headers=headers)

    def import_adapter(self, reference: Reference, *, base: str, files: list[Json],
                       alias: str | None = None) -> Json:
        """Register the adapter whose files (`path`, `sha256`, `bytes`) were sent as a version of NS/NAME over
        `base`; refused, naming the module and both shapes, when it does not fit."""
        return self._http.post(self._artifact(reference) + "/import",
                               json={"base": base, "files": files, "alias": alias})


class Bundles(_Artifacts):
    """Registered scoring bundles (immutable ZIP archives), their aliases, and the archive route that takes their bytes
    (client/bundles.py drives a registration)."""

    ROOT = "/v1/registry/bundles"

    def list(self, *, namespace: str | None = None, archived: bool = False) -> Json:
        return self._http.get(self.ROOT, params={"archived": str(archived).lower(), **_given(namespace=namespace)})

    def versions(self, reference: Reference) -> Json:
        return self._http.get(self._artifact(reference) + "/versions")

    def archive(self, reference: Reference, sha256: str) -> Json:
        """Whether the registry holds the archive whose bytes hash to `sha256` (`held`): then none need be sent."""
        return self._http.get(f"{self._artifact(reference)}/archives/{segment(sha256)}")

    def send_archive(self, reference: Reference, sha256: str, chunks: Iterator[bytes], size: int) -> Json:
        """Stream an archive of `size` bytes whose sha256 is `sha256`; the registry checks and keeps it."""
        headers = {"Content-Length": str(size), "Content-Type": "application/zip"}
        return self._http.request("PUT", f"{self._artifact(reference)}/archives/{segment(sha256)}", content=chunks,
                                  headers=headers)

    def register(self, reference: Reference, *, digest: str, alias: str | None = None) -> Json:
        """Register the held archive `digest` (sha256:HEX) as a version of the reference's NS/NAME, or read the
        version those bytes already are (`created: false`); `alias` is pointed at it."""
        return self._http.post(self._artifact(reference) + "/versions", json={"digest": digest, "alias": alias})

    def check(self, reference: Reference, *, dataset: str, function: str | None = None, samples: int | None = None,
              model: str | None = None, time_limit_s: float | None = None, project: str | None = None,
              generations: int | None = None, temperature: float | None = None,
              max_new_tokens: int | None = None) -> Json:
        """Check the version the reference names against a chat dataset (`dataset`, a reference): the function
        (`function`, MODULE[:FUNCTION]) imports, the row fields its module declares are in every row, and the first
        `samples` rows' own answers score. Runs on the server while the call waits (minutes at most); with `model`,
        a sampling evaluation of it on the same rows starts too (the answer's `sampling.evaluationId`)."""
        given = (("function", function), ("samples", samples), ("model", model), ("timeLimitSeconds", time_limit_s),
                 ("project", project), ("generations", generations), ("temperature", temperature),
                 ("maxNewTokens", max_new_tokens))
        body = {"selector": reference.selector, "dataset": dataset,
                **{key: value for key, value in given if value is not None}}
        return self._http.post(self._artifact(reference) + "/check", json=body)


class Uploads(_Resource):
    """Resumable, sharded dataset uploads (client/registry.py drives them)."""

    ROOT = "/v1/registry/dataset-uploads"

    def start(self, *, dataset: str, data_format: str, shards: list[Json], conversion: Json | None = None,
              prepared: Json | None = None, images: list[Json] | None = None) -> Json:
        """Open (or resume) an upload of `dataset` (NS/NAME); the answer says which shards the registry holds.
        `conversion` records how a file of another format became these shards; `prepared` is the descriptor of
        prepared token rows (whose shards are its Parquet files)."""
        body = {"dataset": dataset, "format": data_format, "shards": shards}
        if conversion is not None:
            body["conversion"] = conversion
        if prepared is not None:
            body["prepared"] = prepared
        if images:
            body["images"] = images
        return self._http.post(self.ROOT, json=body)

    def preview(self, *, dataset: str, data_format: str, shards: list[Json], prepared: Json | None = None,
                images: list[Json] | None = None) -> Json:
        """What `start` would find for these shards — the version's digest, the dataset's version of that digest
        (`existingVersion`) and which shards the registry holds — opening no session and storing nothing."""
        body = {"dataset": dataset, "format": data_format, "shards": shards}
        if prepared is not None:
            body["prepared"] = prepared
        if images:
            body["images"] = images
        return self._http.post(f"{self.ROOT}/preview", json=body)

    def send_shard(self, upload_id: str, index: int, chunks: Iterator[bytes], size: int) -> Json:
        """Stream one shard of `size` bytes, without holding it in memory."""
        return self._http.put_stream(f"{self.ROOT}/{segment(upload_id)}/shards/{index:d}", chunks, size)

    def commit(self, upload_id: str, *, alias: str | None = None) -> Json:
        """Register the uploaded shards as a version; `alias` is pointed at it."""
        return self._http.post(self._path(upload_id, "commit"), json={"alias": alias})


class Images(_Resource):
    """Images of chat rows, kept by the registry under the sha256 of their bytes."""

    ROOT = "/v1/registry/images"

    def held(self, digests: list[str]) -> Json:
        """Which of `digests` the registry holds (`held`) and lacks (`missing`)."""
        return self._http.post(f"{self.ROOT}/held", json={"sha256": digests})

    def send(self, sha256: str, chunks: Iterator[bytes], size: int) -> Json:
        """Stream one image of `size` bytes under its sha256."""
        return self._http.put_stream(f"{self.ROOT}/{segment(sha256)}", chunks, size)


class Sessions(_Resource):
    """Sessions: a conversation file parsed on the server into candidates and kept, named by its hash."""

    ROOT = "/v1/training/sessions"

    def create(self, *, source: str, chunks: Iterator[bytes], size: int, project: str | None = None) -> Json:
        """Stream a conversation file of `size` bytes (oasst1, otel or canonical, as `source` says) into a session
        of `project` (left out: the token's one project); the answer's `created` says whether it is new."""
        headers = {"Content-Length": str(size), "Content-Type": "application/x-ndjson"}
        return self._http.request("POST", self.ROOT, params=_given(source=source, project=project), content=chunks,
                                  headers=headers)

    def get(self, session_hash: str, *, project: str | None = None, limit: int | None = None) -> Json:
        """A session by its hash, with its first `limit` candidates (the server's default where None)."""
        params = _given(project=project)
        if limit is not None:  # 0 asks for none
            params["first"] = limit
        return self._http.get(self._path(session_hash), params=params)


class OptimizeApi:
    """The typed client: one attribute per resource, plus the few calls that stand alone.

    Use it as a context manager (`with OptimizeApi.connect(url) as api:`) or close it; the CLI gets one from
    `client_for(out, timeout=…)`.
    """

    def __init__(self, http: OptimizeClient) -> None:
        self.http = http
        self.runs = Runs(http)
        self.snapshots = Snapshots(http)
        self.evaluations = Evaluations(http)
        self.distillations = Distillations(http)
        self.curations = Curations(http)
        self.comparisons = Comparisons(http)
        self.pipelines = Pipelines(http)
        self.endpoints = Endpoints(http)
        self.projects = Projects(http)
        self.sessions = Sessions(http)
        self.base_models = BaseModels(http)
        self.analyses = Analyses(http)
        self.namespaces = Namespaces(http)
        self.tokens = Tokens(http)
        self.datasets = Datasets(http)
        self.models = Models(http)
        self.bundles = Bundles(http)
        self.adapters = Adapters(http)
        self.uploads = Uploads(http)
        self.images = Images(http)

    @classmethod
    def connect(cls, base_url: str, timeout: float = 60.0, token: str | None = None) -> OptimizeApi:
        return cls(OptimizeClient(base_url, timeout=timeout, token=token))

    @classmethod
    def over(cls, client: OptimizeApi | OptimizeClient) -> OptimizeApi:
        """The typed client over `client`, for functions that accept either."""
        return client if isinstance(client, OptimizeApi) else cls(client)

    @property
    def base_url(self) -> str:
        return self.http.base_url

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> OptimizeApi:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def health(self) -> Json:
        """The server's version and store. Asked once, never retried: a status check should say at once that
        nothing answers."""
        return self.http.get("/v1/health", retries=1)

    def capacity(self, project: str | None = None) -> Json:
        """Device pools, devices, claims and each project's quota and use (one project's with `project`)."""
        return self.http.get("/v1/training/capacity", params={"project": project} if project else None)

    def status(self) -> Json:
        """The deployment at a glance: jobs by kind and phase, device pools, serving endpoints and queued work."""
        return self.http.get("/v1/status")

    def registry_info(self) -> Json:
        """The registry's limits: formats, shard size and count, upload expiry, line length."""
        return self.http.get("/v1/registry/info")

    def collect(self, *, dry_run: bool = False) -> Json:
        """Remove expired upload sessions, orphaned shards and unreferenced blobs (administrators); `dry_run`: only
        count them."""
        return self.http.post("/v1/admin/gc", params={"dryRun": "true"} if dry_run else None)


__all__ = ["OPENAI_CHAT_COMPLETIONS", "Json", "OptimizeApi", "Reply"]
