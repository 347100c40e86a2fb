"""The run job: fetch the attempt's spec, read and render the rows (PREPARING), run the start checks and train
(TRAINING), upload saves as they are written, and report the end: failed, completed, or paused.

Rows are read by the registry's row rule and rendered through `optimize.chat` under the run's loss policy; a
row that breaks a rule fails the run naming its dataset and line. While it runs the worker heart-beats; when
its lease is lost it stops without writing more. A pause the server passes on stops it at the next update
boundary (during PREPARING, at once when `latest`); the plan's `execution.pauseAtStep` stops it after that update
with a save, as a pause with `checkpoint: save` would, and it reports that pause itself. A stop the run's guards
ask for (`execution.stopWhen`) ends training at the next update boundary, that update saved as the final one, and
the run completes there. A resumed attempt first downloads the save it restores, and a branch the parent's save it
starts from. A reward term's scoring bundle, and a judge term's adapter, are downloaded through the job's lease
before the rows are read.

A run granted beside others on one loaded base (`execution.shareBase`, `worker.shared_base`) trains on its seat
there: the same attempt on a thread of the shared worker, its updates taken in turns with theirs, its cost naming
the runs it shared the device with and the device's tokens/s in all.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optimize.core.flops import utilisation
from optimize.schemas.jobs import RunSpec
from optimize.schemas.outcomes import RunLastWord
from optimize.schemas.resolved import ResolvedConfig, ResolvedPlan, ResolvedReward, ResolvedTerm, resolved_config
from optimize.training.prep.data_fit import RowRefused
from optimize.worker.channel import Channel
from optimize.worker.frame import Abandoned, run_framed
from optimize.worker.images import ImageFiles
from optimize.worker.rendering import renderer_for
from optimize.worker.replicas import Replicas, end_with_parent, received, share_cores
from optimize.worker.reporter import Reporter
from optimize.worker.upload_policy import Save, UploadPolicy
from optimize.worker.uploads import SaveUploader

if TYPE_CHECKING:
    from optimize.training.engines.shared_base import Seat, SharedBase

PREPARED_BATCH = 1024  # rendered rows held in memory before they are written out


def run_training(channel: Channel, run_id: str, shared: SharedBase | None = None) -> int:
    """The run's worker, in the frame every job's worker runs in (`worker.frame`): a row a rule refuses fails the
    run by its reason; any other error fails it as "training failed: …"; a dead rank abandons the attempt. With
    `shared`, the base it trains on beside other runs."""
    seat = shared.seat(run_id) if shared is not None else None
    return run_framed(channel, RunSpec, lambda _, spec, reporter: _attempt(channel, spec, reporter, run_id, seat),
                      refusals=(RowRefused,), failed_prefix="training failed: ")


def _attempt(channel: Channel, spec: dict[str, Any], reporter: Reporter, run_id: str,
             seat: Seat | None) -> RunLastWord:
    """One attempt with its save uploader and a work folder of its own, removed whatever the end."""
    # the resolved plan admission made, read back into its model
    plan = ResolvedPlan.model_validate({"config": spec["config"], "execution": spec["execution"]})
    policy = UploadPolicy(plan.execution.resumable_save_every, plan.execution.resumable_save_minutes * 60)
    uploader = SaveUploader(channel, channel.base, policy, before_commit=reporter.flush).start()
    workdir = Path(tempfile.mkdtemp(prefix=f"run-{run_id[:12]}-"))
    preparing = {"workerStart": process_age()}  # the worker's start and its spec, before anything else
    try:
        return _train(channel, spec, plan, reporter, uploader, workdir, preparing, seat)
    except PausedWhilePreparing:
        uploader.close(pausing=True)
        return RunLastWord.pause(None)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _train(channel: Channel, spec: dict[str, Any], plan: ResolvedPlan, reporter: Reporter, uploader: SaveUploader,
           workdir: Path, preparing: dict[str, float], seat: Seat | None = None) -> RunLastWord:
    from optimize.training.engines import harness
    from optimize.training.methods import method_for

    config = plan.config
    method = method_for(config.method)  # what differs by method: rows, recipe, results
    smoke = config.smoke if not (spec.get("resume") or spec.get("branch")) else None  # passed already
    # the engine's imports first, then the model's load beside the downloads and the rows (a smoke check loads
    # its own copy first, so then only the imports are done ahead)
    started = time.monotonic()
    sharded = len(spec["devices"]) > 1 and plan.execution.sharding == "fsdp"  # loaded on the host
    # a shared base is loaded once, by the first of its runs to train
    preload = harness.Preload(spec["model"]["path"], config, model=not smoke and seat is None, place=not sharded) \
        if _model_cached(spec) else None
    preparing["imports"] = round(time.monotonic() - started, 2)
    try:
        return _prepared_and_trained(channel, spec, plan, reporter, uploader, workdir, preparing, method, smoke,
                                     preload, seat)
    finally:
        if preload is not None:
            preload.close()


def _prepared_and_trained(channel, spec, plan: ResolvedPlan, reporter, uploader, workdir, preparing, method, smoke,
                          preload, seat: Seat | None = None):
    from optimize.training.engines import harness

    config, execution = plan.config, plan.execution
    part = _Parts(preparing)
    resume_from = _download_save(channel, spec["resume"], workdir / "resume") if spec.get("resume") else None
    branch = spec.get("branch")
    start = harness.Start(branch["restore"], _download_save(channel, branch, workdir / "branch"), branch["step"]
                          ) if branch else None
    config = _with_term_files(channel, spec, config, workdir)
    renderer = renderer_for(spec["model"])
    total = spec["dataset"]["rows"] + (spec["validation"]["rows"] if spec["validation"] else 0)
    counter = _Progress(reporter, total)
    train_fit, eval_fit = method.fitter(renderer, config), method.fitter(renderer, config)
    part.done("downloads")
    first_rows: list[dict[str, Any]] = []
    train_rows = _prepare(channel, spec["dataset"], method, train_fit, counter, config.dataset,
                          workdir / "train.parquet", first_rows, smoke.rows if smoke else 0)
    eval_rows = None
    if spec["validation"]:
        eval_rows = _prepare(channel, spec["validation"], method, eval_fit, counter, config.validation.dataset,
                             workdir / "validation.parquet")
    for fit, name in ((train_fit, config.dataset), (eval_fit, config.validation.dataset)):
        if name:
            method.check_fit(fit, name)
        if name and not fit.counts.rows:
            raise RowRefused(f"no row of {name} is left: every row is longer than maxSeqLength "
                             f"{config.max_seq_length} under data.truncation: {config.data.truncation}; raise "
                             "maxSeqLength or shorten the rows")
    kept = train_fit.counts.rows
    data_fit = train_fit.counts.as_json()
    trained_rows, updated_over = train_rows, kept  # a smoke check trains its first rows as they are
    if config.packing:  # the run's updates are made over the bins
        from optimize.training.prep.packing import pack_rows

        trained_rows = workdir / "train-packed.parquet"
        packed = pack_rows(train_rows, config.max_seq_length, trained_rows)
        updated_over, data_fit["packing"] = packed.bins, packed.to_json()
    part.done("rows")
    reporter.progress(urgent=True, progress={"rowsDone": total, "rowsTotal": total}, dataFit=data_fit)
    if smoke:
        from optimize.training.engines.smoke import SmokeFailed, smoke_check

        try:  # on a shared base, in the run's turn: the check's training draws from the process's random state
            with seat.held() if seat is not None else nullcontext():
                report = smoke_check(spec["model"]["path"], config, train_rows, first_rows[:kept], renderer, workdir,
                                     _Stops(reporter))
        except SmokeFailed as failed:
            reporter.progress(urgent=True, smoke=failed.report)
            reporter.flush()
            return RunLastWord.failure(f"the smoke check failed: {failed.report['reason']}")
        reporter.progress(urgent=True, smoke=report)
        part.done("smoke")

    pause_at = execution.pause_at_step  # left out of the spec once the run has paused there

    class Hooks:
        at = 0  # the update just made

        def started(self, total_steps: int, checks: dict[str, Any] | None, from_step: int) -> None:
            # a resumed attempt reads PREPARING until its first update
            reporter.progress(urgent=True, training=checks is not None, checks=checks,
                              progress={"observedStep": from_step, "totalSteps": total_steps,
                                        "preparing": dict(preparing)})

        def step(self, step: int, total_steps: int) -> None:
            self.at = step
            reporter.progress(training=True, progress={"observedStep": step, "totalSteps": total_steps,
                                                       **uploader.counts()})

        def metric(self, kind: str, step: int, values: dict[str, Any]) -> None:
            reporter.metric(kind, step, values)
            if kind == "train" and "loss" in values:
                # tokens trained so far (as TRL counts them): a follower's tokens/s
                counted = {"tokens": values["tokens"]} if "tokens" in values else {}
                reporter.progress(progress={"loss": values["loss"], **counted})

        def saved(self, step: int, directory: Path, epoch: float | None, final: bool, epoch_end: bool) -> None:
            uploader.put(Save(step, directory, epoch, final, epoch_end))

        def rollouts(self, step: int, items: list[dict[str, Any]]) -> None:
            reporter.rollouts(step, items)

        def should_stop(self) -> bool:
            return reporter.lost.is_set()

        def pause(self) -> str | None:
            if pause_at is not None and self.at == pause_at:  # the plan's pause: save this update and stop
                reporter.progress(urgent=True, planPause=pause_at)
                return "save"
            return reporter.pause

        def stop_asked(self) -> bool:
            return reporter.stop_asked is not None

    trained = {"modelDir": spec["model"]["path"], "config": config.model_dump(by_alias=True, mode="json"),
               "saveEvery": execution.save_every,
               "trainRows": str(trained_rows), "rows": updated_over, "evalRows": str(eval_rows) if eval_rows else None,
               "workdir": str(workdir), "resumeFrom": str(resume_from) if resume_from else None,
               "start": {"restore": start.restore, "directory": str(start.directory), "step": start.step}
               if start else None, "sharding": execution.sharding}
    ranks = _ranks(channel, len(spec["devices"]), trained)
    try:
        with seat.held() if seat is not None else nullcontext():
            outcome = harness.train(spec["model"]["path"], config, execution.save_every, trained_rows,
                                    updated_over, eval_rows, workdir, Hooks(), resume_from, start, preload, preparing,
                                    sharding=trained["sharding"], shared=seat)
        if ranks is not None:
            ranks.wait(reporter.lost)
    except harness.StartCheckFailed as failed:
        reporter.progress(urgent=True, checks=failed.checks)
        reporter.flush()
        return RunLastWord.failure(str(failed))
    except Exception:
        if ranks is not None and ranks.failed():  # a rank died, and the collective this one was in failed
            raise Abandoned(f"{ranks.failed()}; the run goes on from its newest save") from None
        raise
    finally:
        if ranks is not None:
            ranks.stop()
    uploader.close(pausing=outcome.stopped_at is not None)
    reporter.progress(progress=uploader.counts())
    if outcome.stopped_at is not None and not reporter.lost.is_set():
        reporter.flush()
        return RunLastWord.pause(outcome.stopped_at, uploader.error)
    if uploader.error:
        return RunLastWord.failure(uploader.error)
    last = outcome.ended_early or outcome.total_steps  # its guards may have ended it early (execution.stopWhen)
    if not any(item["step"] >= last for item in uploader.committed):
        return RunLastWord.failure("the final save was not committed")
    reporter.flush()
    losses = outcome.losses
    devices = max(1, len(spec["devices"]))
    return RunLastWord(
        modules=outcome.modules,
        weights_digest=outcome.weights_digest,
        results={
            "trainingLoss": ({"start": losses[0], "end": losses[-1], "mean": sum(losses) / len(losses)}
                             if losses else None),
            "validationLoss": outcome.validation_loss,
            "steps": last,
            "tokens": outcome.tokens,
            "weightsDigest": outcome.weights_digest,
            **method.results(config, outcome.last),
        },
        cost={
            "trainingSeconds": round(outcome.train_seconds, 2),
            "tokensPerSecondPerDevice": round(outcome.tokens / outcome.train_seconds / devices, 1)
            if outcome.train_seconds else None,
            "mfu": _utilisation(outcome, devices, config.model.trains),
            "peakDeviceMemoryGiB": outcome.peak_device_gib,
            "peakDeviceReservedGiB": outcome.peak_reserved_gib,
            "startCheckPeakGiB": outcome.start_check_peak_gib,
            "hostMemoryGiB": outcome.host_gib,
            **({"sharedBase": seat.figures()} if seat is not None else {}),
        },
    )


def _utilisation(outcome, devices: int, adapter: str) -> dict[str, Any] | None:
    """The run's MFU on a device whose peak is known, on the basis of what it trains (`core.flops`: 4N an adapter's
    token, 6N a full fine-tune's); None on the cpu and for a run too short to time."""
    if not outcome.train_seconds:
        return None
    found = utilisation(outcome.base_parameters, outcome.tokens / outcome.train_seconds / devices, outcome.device,
                        adapter)
    return found.to_json() if found else None


def _ranks(channel: Channel, devices: int, trained: dict[str, Any]) -> Replicas | None:
    """On several devices, the other ranks of the data-parallel run, started with what they train (the rows and
    saves this worker prepared, on this node); this worker becomes rank 0."""
    if devices <= 1:
        return None
    from optimize.training.engines import distributed

    port = distributed.free_port()
    os.environ.update(distributed.environment(0, devices, port))
    share_cores(devices)
    ranks = Replicas(channel, devices, lambda index: distributed.environment(index, devices, port))
    ranks.hand_out([trained] * (devices - 1))
    return ranks


def run_replica(channel: Channel, run_id: str, index: int) -> int:
    """A rank of a data-parallel run: it trains its share of every batch and follows rank 0's decisions; rank 0
    reports everything (a failed start check included)."""
    end_with_parent()
    work = received()
    if work is None:
        return 0
    from optimize.training.engines import distributed, harness

    share_cores(distributed.world()[1])
    start = work["start"]
    try:
        harness.train(work["modelDir"], resolved_config(work["config"]), work["saveEvery"], Path(work["trainRows"]),
                      work["rows"],
                      Path(work["evalRows"]) if work["evalRows"] else None, Path(work["workdir"]), _Following(),
                      Path(work["resumeFrom"]) if work["resumeFrom"] else None,
                      harness.Start(start["restore"], Path(start["directory"]), start["step"]) if start else None,
                      sharding=work.get("sharding"))
    except harness.StartCheckFailed:
        return 0
    print(f"rank {index} trained its share", flush=True)
    return 0


class _Following:
    """A follower rank's hooks: it reports nothing and decides nothing (rank 0's decisions reach it)."""

    def started(self, total_steps: int, checks: dict[str, Any] | None, from_step: int) -> None: ...
    def step(self, step: int, total_steps: int) -> None: ...
    def metric(self, kind: str, step: int, values: dict[str, Any]) -> None: ...
    def saved(self, step: int, directory: Path, epoch: float | None, final: bool, epoch_end: bool) -> None: ...
    def rollouts(self, step: int, items: list[dict[str, Any]]) -> None: ...

    def should_stop(self) -> bool:
        return False

    def pause(self) -> str | None:
        return None


def process_age() -> float | None:
    """Seconds since this process started (Linux: /proc), or None where that cannot be read."""
    try:
        started_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return round(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError):
        return None


def _model_cached(spec: dict[str, Any]) -> bool:
    return bool(spec["model"].get("path")) and Path(spec["model"]["path"]).is_dir()


class _Parts:
    """Seconds of PREPARING's parts, each from the end of the one before."""

    def __init__(self, parts: dict[str, float]) -> None:
        self.parts, self._since = parts, time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.parts[name] = round(now - self._since, 2)
        self._since = now


class _Stops:
    """What the smoke check asks of the attempt while it trains its slice: whether to stop."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter

    def should_stop(self) -> bool:
        return self.reporter.lost.is_set()


class PausedWhilePreparing(Exception):
    """A latest pause reached the worker before its first update: it stops without training."""


def _with_term_files(channel: Channel, spec: dict[str, Any], config: ResolvedConfig,
                     workdir: Path) -> ResolvedConfig:
    """The config with its reward terms' files on local disk: a scoring bundle, verified; a judge's model
    (`_judge_files`). A config without reward terms is returned as it is."""
    reward = config.reward
    if not isinstance(reward, ResolvedReward):  # a reinforcement run's: what a supervised plan states is not read
        return config
    local = []
    for term in reward.terms:
        if term.bundle_sha256:
            term = term.model_copy(update={"bundle_path": str(channel.fetch_blob(term.bundle_sha256))})
        if term.kind == "judge":
            term = _judge_files(channel, term, (spec.get("judges") or {}).get(term.name), workdir)
        local.append(term)
    return config.model_copy(update={"reward": reward.model_copy(update={"terms": local})})


def _judge_files(channel: Channel, term: ResolvedTerm, judge: dict[str, Any] | None, workdir: Path) -> ResolvedTerm:
    """A judge term's model as the reward loads it: its base model's block (where this host caches it, how its
    prompts render), its adapter's files downloaded (verified) through the job's lease, and its instructions."""
    if judge is None:
        raise RuntimeError(f"the spec names no judge model for reward term {term.name}")
    if not judge["model"].get("path") or not Path(judge["model"]["path"]).is_dir():
        raise RuntimeError(f"the judge of reward term {term.name}, {judge['reference']}, needs base model "
                           f"{judge['model']['id']}, which is not in this host's model cache")
    adapter = None
    if judge.get("adapterManifest"):
        manifest = judge["adapterManifest"]
        adapter = str(channel.fetch_artifact(manifest, workdir / f"judge-{manifest[:16]}"))
    return term.model_copy(update={"judge_model": judge["model"], "judge_adapter_path": adapter,
                                   "instructions": judge.get("instructions")})


def _download_save(channel: Channel, save: dict[str, Any], target: Path) -> Path:
    """The save an attempt resumes from (or a branch starts from) as a checkpoint folder, every blob verified."""
    folder = target / f"checkpoint-{save['step']}"
    for artifact in save["artifacts"]:
        channel.fetch_artifact(artifact["manifestSha256"], folder)
    return folder


class _Progress:
    """Rows done of rows total, reported at most once a second."""

    def __init__(self, reporter: Reporter, total: int) -> None:
        self.reporter, self.total, self.done, self._last = reporter, total, 0, 0.0

    def advance(self) -> None:
        if self.reporter.pause == "latest":
            raise PausedWhilePreparing
        self.done += 1
        now = time.monotonic()
        if now - self._last >= 1.0:
            self._last = now
            self.reporter.progress(progress={"rowsDone": self.done, "rowsTotal": self.total})


def _prepare(channel: Channel, dataset: dict[str, Any], method, fitter, counter: _Progress, reference: str,
             target: Path, first: list[dict[str, Any]] | None = None, keep: int = 0) -> Path:
    """Each example checked by the registry's rule for the method's dataset kind and fitted (None: left out), its
    columns (the method's token-id `columns`, then its `text_columns`) written to a Parquet file on local disk a
    batch at a time, so memory holds one batch whatever the dataset's size. The first `keep` rows that train are
    added to `first` (a smoke check answers them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from optimize.training.prep.image_batches import IMAGE_COLUMN

    images = bool(dataset.get("images"))  # rows with images: each row's image files beside its tokens
    names = method.columns + method.text_columns + ((IMAGE_COLUMN,) if images else ())
    schema = pa.schema([(name, pa.list_(pa.int32())) for name in method.columns]
                       + [(name, pa.string()) for name in method.text_columns]
                       + ([(IMAGE_COLUMN, pa.list_(pa.string()))] if images else []))
    batch: dict[str, list] = {name: [] for name in names}
    fitted_rows = _given_rows(channel, dataset, fitter, reference) if dataset.get("prepared") else \
        _rendered_rows(channel, dataset, method, fitter, reference)
    with pq.ParquetWriter(target, schema) as writer:
        for row, fitted in fitted_rows:
            counter.advance()
            if first is not None and len(first) < keep and fitted is not None:
                first.append(row)
            if fitted is None:
                continue
            for name, ids in zip(names, (*method.columns_of(fitted), *((list(fitted.images),) if images else ())),
                                 strict=True):
                batch[name].append(ids)
            if len(batch[names[0]]) == PREPARED_BATCH:
                writer.write_table(pa.table(batch, schema=schema))
                batch = {name: [] for name in names}
        if batch[names[0]]:
            writer.write_table(pa.table(batch, schema=schema))
    return target


def _rendered_rows(channel: Channel, dataset: dict[str, Any], method, fitter, reference: str):
    """(row, its fitted render or None) of a dataset of JSON rows, each checked by the registry's rule first."""
    import orjson

    from optimize.chat.rows import RowError, RowKind, check_row

    kind = RowKind(method.dataset_kind)
    images = ImageFiles(channel, dataset.get("images") or [])
    for line, raw in channel.example_lines(dataset["objects"]):
        try:
            row = orjson.loads(raw)
            check_row(row, kind)
        except (RowError, orjson.JSONDecodeError) as error:
            raise RowRefused(f"{reference} line {line}: {error}") from None
        yield row, fitter.fit(images.resolved(row, f"{reference} line {line}"), f"{reference} line {line}")


def _given_rows(channel: Channel, dataset: dict[str, Any], fitter, reference: str):
    """(None, the fitted row or None) of prepared token rows: each Parquet file's input_ids and loss_mask as given
    (the registry checked every rule when they were registered), fitted into maxSeqLength."""
    import pyarrow.parquet as pq

    for item in dataset["objects"]:
        handle = pq.ParquetFile(channel.fetch_blob(item["sha256"]))
        row = 0
        for batch in handle.iter_batches(columns=["input_ids", "loss_mask"]):
            for ids, mask in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                row += 1
                yield None, fitter.fit_tokens(ids, mask, f"{reference} {item['path']} row {row}")
