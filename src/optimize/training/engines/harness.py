"""The run loop every training method shares: load the model, put a PEFT LoRA adapter on it, train with the
method's TRL recipe (`training.methods`), and report through `EngineHooks` — metrics at every update, each save
once written, whether to stop or pause, whether the run's guards asked it to end where it is
(`execution.stopWhen`: it saves that update as its final one and completes), a reinforcement run's sample of
rollouts — with the start checks, resumes and branches handled the same way for every method.

Rows arrive prepared by the worker (token-id columns, see each method's `columns`) in Parquet files on local
disk, memory-mapped rather than held in memory.

A resumed attempt restores a save (adapter, optimizer, scheduler, RNG, data position) through TRL's own
`resume_from_checkpoint`, so on CPU with a seed it continues exactly where the save was taken.

On several devices the same loop runs in one process per device (`training.engines.distributed`): each trains
its own batch of every update (the plan's batchSize is per device), rank 0's hooks decide and report, the others
follow its decisions. With `execution.sharding: fsdp` the model's weights, the adapter and its optimizer state are
sharded across the ranks (FSDP2 through accelerate, each decoder layer a unit); the model is loaded on the host and
FSDP moves each rank's shard to its device; a save holds the whole adapter (FULL_STATE_DICT), so it serves and
branches as any other, with the optimizer as accelerate saves a sharded one (`optimizer.bin`).
"""

from __future__ import annotations

import inspect
import math
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from optimize.schemas.resolved import ResolvedConfig
from optimize.training.adapters import saved_weights_digest
from optimize.training.engines import distributed
from optimize.training.engines.checks import failure_reason, reference_check, summary
from optimize.training.engines.profiling import profiled_updates, update_profiler
from optimize.training.engines.shared_base import Seat
from optimize.training.methods import method_for

# the torch dtype of each precision (a function of torch, which is imported only where a model is loaded)
DTYPES = {"fp32": lambda torch: torch.float32, "bf16": lambda torch: torch.bfloat16,
          "fp16": lambda torch: torch.float16}


class EngineHooks(Protocol):
    def started(self, total_steps: int, checks: dict[str, Any] | None, from_step: int) -> None: ...
    def step(self, step: int, total_steps: int) -> None: ...
    def metric(self, kind: str, step: int, values: dict[str, Any]) -> None: ...
    def saved(self, step: int, directory: Path, epoch: float | None, final: bool, epoch_end: bool) -> None: ...
    def should_stop(self) -> bool: ...
    def pause(self) -> str | None: ...
    # optional: a reinforcement method's sample of each update's rollouts (prompts, completions, term scores);
    # hooks without it record none
    def rollouts(self, step: int, items: list[dict[str, Any]]) -> None: ...
    # optional: whether the run's guards asked it to end at this update and complete; hooks without it never are
    def stop_asked(self) -> bool: ...


class StartCheckFailed(Exception):
    """A start check refused the run before its first update."""

    def __init__(self, checks: dict[str, Any], reason: str) -> None:
        super().__init__(reason)
        self.checks = checks


@dataclass
class Outcome:
    total_steps: int
    train_seconds: float
    tokens: int
    losses: list[float] = field(default_factory=list)
    validation_loss: float | None = None
    modules: list[str] = field(default_factory=list)
    weights_digest: str | None = None
    peak_device_gib: float | None = None  # allocated, in training (after the start checks)
    peak_reserved_gib: float | None = None  # the caching allocator's reserved peak, in training
    start_check_peak_gib: float | None = None  # allocated, during the start checks (a second copy of the model)
    host_gib: float = 0.0
    base_parameters: int = 0  # the frozen base's weights (N of the utilisation's 4N), the adapter's left out
    device: str = "cpu"  # the accelerator's name, as torch gives it
    stopped_at: int | None = None  # the update it stopped after, when it stopped before its last one
    ended_early: int | None = None  # the update it completed at, when its guards asked it to end there
    last: dict[str, float] = field(default_factory=dict)  # the newest value of each training metric


class Preload:
    """The base model's load on a thread of its own while the worker downloads what the attempt needs and renders
    its rows: PREPARING waits only for what is left of it once the rows are ready. The engine's imports (torch,
    Transformers, PEFT, TRL, the model's own class) are done first, on the caller's thread: two threads resolving
    Transformers' lazy names at once can fail ("cannot import name …"). With `model` False (an attempt that runs a
    smoke check first, which loads its own copy) only the imports are done."""

    def __init__(self, model_dir: str, config: ResolvedConfig, model: bool = True, place: bool = True) -> None:
        from transformers import AutoConfig

        from optimize.chat.vision import auto_model

        engine_imports()

        if model:
            try:  # the model's class, and with it its modeling module
                auto_model(model_dir)._model_mapping[type(AutoConfig.from_pretrained(model_dir))]
            except Exception:  # noqa: BLE001 - from_pretrained says what is wrong, where the model is taken
                pass
        self.model_dir, self.config, self.wanted, self.place = model_dir, config, model, place
        self._model, self._error, self.seconds = None, None, 0.0
        self._thread = threading.Thread(target=self._load, name="preload", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        started = time.monotonic()
        try:
            if self.wanted:
                self._model = load_model(self.model_dir, self.config, place=self.place)
        except BaseException as error:  # noqa: BLE001 - raised again where the model is taken
            self._error = error
        self.seconds = round(time.monotonic() - started, 2)

    def take(self) -> Any:
        """The loaded model, once the thread is done (None when only the imports were wanted)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        model, self._model = self._model, None
        return model

    def close(self) -> None:
        """Wait for the thread (an attempt that ends before training leaves nothing loading as it exits)."""
        self._thread.join()
        self._model = None


def engine_imports() -> None:
    """Torch, Transformers, PEFT and TRL imported on the calling thread, before any other thread resolves their lazy
    names (two at once can fail: "cannot import name …")."""
    import peft  # noqa: F401
    import trl  # noqa: F401
    from datasets import Dataset  # noqa: F401
    from peft import LoraConfig, PeftModel, get_peft_model  # noqa: F401
    from transformers import AutoConfig, AutoTokenizer, TrainerCallback  # noqa: F401
    from trl import SFTConfig, SFTTrainer  # noqa: F401


def load_model(model_dir: str, config: ResolvedConfig, dtype=None, place: bool = True):
    """The base model under plain Transformers at the run's precision (or `dtype`) and attention, on the GPU when
    one is visible and `place` (a sharded run leaves it on the host: FSDP moves each rank's shard). A model that
    takes images is loaded whole, its vision tower beside its language model (`chat.vision`). Under qlora its
    linear weights are quantized to 4 bits as it loads (bitsandbytes nf4, its computation at the run's precision),
    straight onto the GPU."""
    import torch

    from optimize.chat.vision import auto_model

    dtype = dtype or DTYPES[config.model.precision](torch)
    device = f"cuda:{distributed.local_device()}"
    quantized = {}
    if config.model.trains == "qlora":
        from transformers import BitsAndBytesConfig

        quantized = {"quantization_config": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype,
            bnb_4bit_use_double_quant=True), "device_map": {"": device}}
    loaded = auto_model(model_dir).from_pretrained(model_dir, dtype=dtype,
                                                   attn_implementation=config.model.attention_implementation,
                                                   **quantized)
    if quantized:
        return loaded
    return loaded.to(device) if place and torch.cuda.is_available() else loaded


# a model that takes images trains LoRA on its language model: its vision tower and the connector that projects
# the tower's features into the language model stay as they are (frozen, with no adapter)
_VISION_MODULES = r".*\.(vision_model|connector)\..*"


def vision_modules(model_dir: str) -> str | None:
    """The modules a LoRA adapter leaves out for the model in `model_dir` (PEFT's `exclude_modules`), or None."""
    from optimize.chat.vision import takes_images

    return _VISION_MODULES if takes_images(model_dir) else None


def common_arguments(config: ResolvedConfig, workdir: Path, steps: int, save_every: int, offset: int,
                     evaluates: bool, cuda: bool, ranks: int = 1, sharded: bool = False) -> dict[str, Any]:
    """The trainer arguments every method's TRL config takes (`Method.arguments` adds its own): the loop, the
    optimizer and the schedule the run trains with, its seed, precision and saves. `steps` is the engine's update
    counter, `offset` a trainingState branch's start on its parent's counter."""
    trained_with = config.trained_with
    loop, optimizer, precision = trained_with.training, trained_with.optimizer, config.model.precision
    return dict(
        output_dir=str(workdir), max_steps=steps, per_device_train_batch_size=loop.batch_size,
        per_device_eval_batch_size=loop.batch_size, gradient_accumulation_steps=loop.gradient_accumulation,
        learning_rate=optimizer.learning_rate, weight_decay=optimizer.weight_decay, warmup_steps=loop.warmup_steps,
        lr_scheduler_type="linear", seed=config.seed, data_seed=config.seed, logging_steps=1,
        # on the parent's counter the trainer's own save rule would count from the parent's start
        save_strategy="steps", save_steps=save_every if not offset else 10**9, save_only_model=False,
        eval_strategy="steps" if evaluates else "no",
        eval_steps=(loop.validation_frequency_steps or save_every) if evaluates else None,
        bf16=cuda and precision == "bf16", fp16=cuda and precision == "fp16", use_cpu=not cuda,
        activation_checkpointing=config.model.gradient_checkpointing, report_to="none",
        remove_unused_columns=False, disable_tqdm=True, dataloader_num_workers=0,
        # several ranks: gloo on the cpu; the adapter's weights are all used, so DDP need not search for unused ones
        **({"ddp_backend": "nccl" if cuda else "gloo", "ddp_find_unused_parameters": False} if ranks > 1 else {}),
        **({"fsdp": True, "fsdp_config": distributed.FSDP_CONFIG} if sharded else {}),
    )


@dataclass(frozen=True)
class Start:
    """Where a branch starts: a parent's save (a checkpoint folder) and what it restores from it."""

    restore: str  # weights | trainingState
    directory: Path
    step: int  # the parent's update the save was taken at


def train(model_dir: str, config: ResolvedConfig, save_every: int | None, train_rows: Path, rows: int,
          eval_rows: Path | None, workdir: Path, hooks: EngineHooks, resume_from: Path | None = None,
          start: Start | None = None, preload: Preload | None = None,
          preparing: dict[str, float] | None = None, sharding: str | None = None, shared: Seat | None = None
          ) -> Outcome:
    """Train by `config.method` on prepared rows memory-mapped from local disk; from the save in `resume_from`
    (a checkpoint folder) when the attempt resumes, and from a parent's save on a branch.

    A trainingState branch goes on from its parent's update counter (so the optimizer, RNG and data position
    restore as a resume does) but reports its own updates from 0, saves on its own count, and trains on a schedule
    spanning its own updates at its own learning rate.

    `shared`: the run's seat on a base other runs train on too (`execution.shareBase`): its adapter is added to the
    one loaded model, and it trains in turns with theirs (`training.engines.shared_base`); its worker holds the seat.

    `preparing` receives the seconds of the engine's parts of PREPARING before `hooks.started` is called:
    modelLoad (what was left of the load), modelLoadAhead (the preload's whole time), trainer (its construction:
    the adapter, the datasets) and startCheck."""
    preparing = {} if preparing is None else preparing
    clock = {"start": 0.0, "prepare": time.monotonic()}
    preloaded = preload.take() if preload is not None else None
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback

    method = method_for(config.method)
    cuda = torch.cuda.is_available()
    precision = config.model.precision
    dtype = DTYPES[precision](torch)
    hyperparams = config.trained_with  # rlHyperparams for a reinforcement run
    loop, lora = hyperparams.training, hyperparams.lora
    rank, ranks = distributed.world()
    own_steps = loop.updates(rows, ranks)  # batchSize is per device: an update takes a batch from each
    offset = start.step if start is not None and start.restore == "trainingState" else 0
    steps = offset + own_steps  # the engine's counter; hooks see updates from 0
    save_every = save_every or own_steps
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sharded = ranks > 1 and sharding == "fsdp"

    def load(at_dtype):
        return load_model(model_dir, config, at_dtype, place=not sharded)

    common = common_arguments(config, workdir, steps, save_every, offset, eval_rows is not None, cuda, ranks,
                              sharded)
    args = method.arguments(config, common, cuda)
    full = config.model.trains == "full"  # every weight trains: no adapter
    peft_config = None if full else LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                               target_modules=lora.targets, task_type="CAUSAL_LM",
                                               exclude_modules=vision_modules(model_dir))
    outcome = Outcome(total_steps=own_steps, train_seconds=0.0, tokens=0)

    class Bridge(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, model=None, **kwargs):
            clock["start"] = time.monotonic()
            if sharded and not rank:
                print(distributed.sharded_units(model, ranks), flush=True)
            if offset:
                _own_schedule(optimizer, lr_scheduler, hyperparams.optimizer.learning_rate, loop.warmup_steps,
                              offset, own_steps)

        def on_step_end(self, args, state, control, **kwargs):
            own = state.global_step - offset
            hooks.step(own, own_steps)
            if offset and own % save_every == 0:
                control.should_save = True
            if state.global_step >= steps:
                return  # the last update: it completes and saves whatever was asked
            asked = getattr(hooks, "stop_asked", None)
            stop, pause, end = distributed.agreed((hooks.should_stop(), hooks.pause(), bool(asked and asked())))
            if stop:  # the attempt is no longer this worker's: write nothing more
                control.should_training_stop = True
                control.should_save = False
            elif pause is not None:
                # latest keeps a save that falls due on this update; save saves now; both then stop
                control.should_training_stop = True
                control.should_save = control.should_save or pause == "save"
                outcome.stopped_at = own
            elif end:  # execution.stopWhen was met: this update is the run's last, saved as its final one
                control.should_training_stop = True
                control.should_save = True
                outcome.ended_early = own

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "eval_loss" in logs:
                outcome.validation_loss = float(logs["eval_loss"])
                hooks.metric("validation", state.global_step - offset,
                             {"validationLoss": outcome.validation_loss,
                              "perplexity": math.exp(min(outcome.validation_loss, 50))})
                return
            values = method.metric_values(logs)
            if "tokens" in values:
                values["tokens"] = int(values["tokens"])
            if "loss" in values:
                outcome.last.update(values)
                outcome.losses.append(values["loss"])
                outcome.tokens = int(values.get("tokens", outcome.tokens))
                hooks.metric("train", state.global_step - offset, values)

        def on_save(self, args, state, control, **kwargs):
            distributed.barrier()  # every rank has written its part of the save (its random state)
            if rank:
                return
            directory = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            final = state.global_step >= steps or outcome.ended_early == state.global_step - offset
            if final:
                outcome.weights_digest = saved_weights_digest(directory)
            epoch_end = state.epoch is not None and state.epoch >= 1 and abs(state.epoch - round(state.epoch)) < 1e-6
            hooks.saved(state.global_step - offset, directory, state.epoch, final, epoch_end)

    weights_start = start.directory if start is not None and start.restore == "weights" else None
    if shared is not None:  # the one loaded base, with this run's adapter added
        model = shared.adapted(model_dir, lambda: load(dtype), peft_config, config.seed, weights_start)
        peft_config = None
    else:
        model = preloaded if preloaded is not None else load(dtype)
    preparing["modelLoad"] = round(time.monotonic() - clock["prepare"], 2)  # what was left of it
    if preload is not None:
        preparing["modelLoadAhead"] = preload.seconds  # its whole time, while the rows were rendered
    clock["prepare"] = time.monotonic()
    if weights_start is not None and shared is None and full:  # the parent's weights, with a fresh optimizer
        model = load_model(str(weights_start), config, dtype, place=not sharded)
    elif weights_start is not None and shared is None:  # the parent's adapter, trained on with a fresh optimizer
        from peft import PeftModel

        model, peft_config = PeftModel.from_pretrained(model, str(weights_start), is_trainable=True), None
    arrow = str(workdir / f"arrow{rank or ''}")  # a cache of each rank's own
    datasets = (Dataset.from_parquet(str(train_rows), cache_dir=arrow),
                Dataset.from_parquet(str(eval_rows), cache_dir=arrow) if eval_rows else None)
    extra = {}
    if getattr(hooks, "rollouts", None) is not None and "rollouts" in inspect.signature(method.trainer).parameters:
        extra["rollouts"] = lambda step, items: hooks.rollouts(step - offset, items)  # a branch's own updates
    callbacks = [Bridge()] + ([shared.turns()] if shared is not None else [])
    if profiled_updates():  # where an update's time goes, in the worker's log (training.engines.profiling)
        callbacks.append(update_profiler(profiled_updates(), cuda))
    trainer = method.trainer(model, args, tokenizer, peft_config, *datasets, callbacks, config=config,
                             workdir=workdir, **extra)
    if sharded and not cuda:
        distributed.shard_on_cpu(trainer)
    if shared is not None:
        shared.saves_own_adapter(trainer)
    outcome.modules, outcome.base_parameters = _trained_parts(trainer.model, full,
                                                              shared.adapter if shared is not None else "default")
    outcome.device = torch.cuda.get_device_name() if cuda else "cpu"
    preparing["trainer"] = round(time.monotonic() - clock["prepare"], 2)
    if resume_from is None and offset:
        resume_from = start.directory  # a trainingState branch restores as a resume does
    if resume_from is not None or start is not None:  # the base model was checked when the lineage started
        hooks.started(own_steps, None, _restored_step(resume_from) - offset if resume_from else 0)
        _training_peak_from_here(cuda)
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        return _finished(outcome, clock, cuda)
    clock["prepare"] = time.monotonic()
    checks = _checked_by_rank_0(trainer, load, dtype, config, cuda, rank) if method.reference_check else summary([])
    preparing["startCheck"] = round(time.monotonic() - clock["prepare"], 2)
    checked_peak = _training_peak_from_here(cuda)
    outcome.start_check_peak_gib = checked_peak if method.reference_check else None
    hooks.started(own_steps, checks, 0)
    trainer.train()
    return _finished(outcome, clock, cuda)


def _trained_parts(model, full: bool, adapter: str = "default") -> tuple[list[str], int]:
    """The modules the run's adapter adapts (none for a full fine-tune) and the base parameters a token is computed
    with (N of the utilisation's 4N or 6N): every weight of a full fine-tune; under adapters, every weight but
    theirs (the model holds several on a shared base), a 4-bit weight counted as the weight it stands for (PEFT's
    count)."""
    if full:
        return [], sum(p.numel() for p in model.parameters())
    modules = sorted({name.rsplit(".", 1)[-1] for name in model.peft_config[adapter].target_modules})
    _, every = model.get_nb_trainable_parameters()
    return modules, every - sum(p.numel() for name, p in model.named_parameters() if ".lora_" in name)


def _checked_by_rank_0(trainer, load, dtype, config: ResolvedConfig, cuda: bool, rank: int) -> dict[str, Any]:
    """The start checks on rank 0's first batch; every rank takes its verdict (a failed check stops them all)."""
    checks, failure = None, None
    if rank == 0:
        try:
            checks = _start_checks(trainer, load, dtype, config, cuda)
        except StartCheckFailed as failed:
            failure = (failed.checks, str(failed))
    checks, failure = distributed.agreed((checks, failure))
    if failure is not None:
        raise StartCheckFailed(*failure)
    return checks


def _start_checks(trainer, load, dtype, config: ResolvedConfig, cuda: bool) -> dict[str, Any]:
    """The reference check on the first batch; raises StartCheckFailed when it fails.

    The random state is put back afterwards so training draws what a plain TRL run with the same seed draws
    (data order, dropout masks)."""
    import torch

    state = torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None
    batch = next(iter(trainer.get_train_dataloader()))
    stated = config.checks.reference.model_dump(exclude_none=True)  # the bounds the plan states
    check = reference_check(trainer.model, load, batch, dtype, stated, at_fp32=config.model.trains != "qlora")
    torch.set_rng_state(state[0])
    if cuda:
        torch.cuda.set_rng_state_all(state[1])
    checks = summary([check])
    if check["status"] == "failed":
        raise StartCheckFailed(checks, failure_reason(check))
    return checks


def _training_peak_from_here(cuda: bool) -> float | None:
    """Start measuring the training peak: return the peak so far (the start checks', whose reference copy of the
    model and fp32 logits would otherwise pass for the training peak), hand the pool they left back to the device,
    and reset the peak counters."""
    if not cuda:
        return None
    import torch

    before = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return before


def _own_schedule(optimizer, scheduler, learning_rate: float, warmup: int, offset: int, own_steps: int) -> None:
    """Replace the restored schedule with the trainer's linear warmup-and-decay spanning the branch's own updates
    at its own learning rate; the optimizer's moments stay as restored."""

    def factor(step: int) -> float:
        own = step - offset
        if own < warmup:
            return own / max(1, warmup)
        return max(0.0, (own_steps - own) / max(1, own_steps - warmup))

    scheduler.lr_lambdas = [factor for _ in optimizer.param_groups]
    scheduler.base_lrs = [learning_rate for _ in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["initial_lr"] = learning_rate
        group["lr"] = learning_rate * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]


def _restored_step(checkpoint: Path) -> int:
    import json

    return int(json.loads((checkpoint / "trainer_state.json").read_text())["global_step"])


def _finished(outcome: Outcome, clock: dict[str, float], cuda: bool) -> Outcome:
    import torch

    outcome.train_seconds = time.monotonic() - clock["start"]
    if cuda:
        outcome.peak_device_gib = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        outcome.peak_reserved_gib = round(torch.cuda.max_memory_reserved() / 2**30, 3)
    outcome.host_gib = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    return outcome
