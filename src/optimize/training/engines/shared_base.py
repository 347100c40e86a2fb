"""Several runs trained on one loaded copy of their base (`execution.shareBase`): each run is a PEFT LoRA adapter of
its own on the one model, with its own TRL trainer, optimizer, schedule, data order and saves; the runs take turns,
an update at a time.

A turn is held from one of the run's updates to its next: its batch, forward, backward, optimizer step, logging,
saves and validation all happen while no other run touches the model. A run's turn begins with the random state it
left at the end of its last one (torch's, CUDA's, Python's and NumPy's) and its own adapter active (so only its
adapter takes gradients and its optimizer holds only that adapter), and accelerate's gradient-sync flag as its loop
set it: each run draws exactly what it would draw alone, so its losses and saves are those of the same run trained
by itself. Its adapter is added with the seed set first, as TRL does before it wraps a model alone. Turns go round
in the order runs ask for them; a run still preparing its rows holds nobody up.

A save holds only the run's own adapter, written as a run trained alone writes it (`adapter_model.safetensors`
with `adapter_config.json` at the save's root), so saves resume, branch, register and serve as any other.

Each run's tokens/s is its own tokens over its own training time, turns of the others included; the device's total
is every run's tokens over the time since the first one started.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def adapter_name(run_id: str) -> str:
    """The PEFT adapter name of a run on the shared model."""
    return f"run_{run_id}"


@dataclass
class _Left:
    """What a run's turn leaves to its next: the random states and accelerate's gradient-sync flag."""

    torch_state: Any
    cuda_states: Any
    python_state: Any
    numpy_state: Any
    sync_gradients: bool | None


class SharedBase:
    """The one loaded base of the runs one worker trains together, and the turns they take on it."""

    def seat(self, run_id: str) -> Seat:
        return Seat(self, run_id)

    def __init__(self, run_ids: list[str]) -> None:
        self.run_ids = list(run_ids)
        self.model: Any = None  # the base, then the PEFT model holding each run's adapter
        self._model_dir: str | None = None
        self._turns = threading.Condition()
        self._holder: str | None = None
        self._asking: deque[str] = deque()
        self._left: dict[str, _Left] = {}
        self.tokens: dict[str, int] = {}
        self._first_start: float | None = None

    # --- turns ---------------------------------------------------------------------------------------------------

    @contextmanager
    def held(self, run_id: str):
        """The run's work on the model, from its preparation to its end: the turn is held throughout but for the
        hand-overs at its updates (`next_turn`)."""
        self._take(run_id)
        try:
            yield self
        finally:
            self._left.pop(run_id, None)
            self._give(run_id)

    def next_turn(self, run_id: str) -> None:
        """Between two of the run's updates: the others waiting take theirs, then this run goes on as it left."""
        import torch

        with self._turns:
            if not self._asking:
                return  # no other run waits: its turn goes on, nothing to put aside
        self._left[run_id] = _Left(torch.get_rng_state(),
                                   torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                                   random.getstate(), _numpy_state(), _sync_gradients())
        self._give(run_id)
        self._take(run_id)
        left = self._left[run_id]
        torch.set_rng_state(left.torch_state)
        if left.cuda_states is not None:
            torch.cuda.set_rng_state_all(left.cuda_states)
        random.setstate(left.python_state)
        _set_numpy_state(left.numpy_state)
        _set_sync_gradients(left.sync_gradients)
        self.model.set_adapter(adapter_name(run_id))

    def _take(self, run_id: str) -> None:
        with self._turns:
            self._asking.append(run_id)
            self._turns.wait_for(lambda: self._holder is None and self._asking[0] == run_id)
            self._asking.popleft()
            self._holder = run_id

    def _give(self, run_id: str) -> None:
        with self._turns:
            if self._holder == run_id:
                self._holder = None
            self._turns.notify_all()

    # --- the model -------------------------------------------------------------------------------------------

    def adapted(self, run_id: str, model_dir: str, load, peft_config, seed: int, start_directory: Path | None):
        """The shared model with the run's adapter added and active: a new one under `peft_config` (seeded as TRL
        seeds a run's own), or the adapter of a parent's save a branch starts from. The base is loaded (`load()`)
        by the first run that asks."""
        from peft import PeftModel, get_peft_model
        from transformers import set_seed

        if self._model_dir is not None and self._model_dir != model_dir:
            raise RuntimeError(f"runs sharing a base must share its model files ({self._model_dir}, {model_dir})")
        name = adapter_name(run_id)
        base = self.model if self.model is not None else load()
        self._model_dir = model_dir
        if start_directory is not None:  # a branch's parent adapter, trained on with a fresh optimizer
            if isinstance(base, PeftModel):
                base.load_adapter(str(start_directory), adapter_name=name, is_trainable=True)
                self.model = base
            else:
                self.model = PeftModel.from_pretrained(base, str(start_directory), adapter_name=name,
                                                       is_trainable=True)
        else:
            set_seed(seed)  # the adapter's random start, as TRL draws it for a run alone
            if isinstance(base, PeftModel):
                base.add_adapter(name, peft_config)
                self.model = base
            else:
                self.model = get_peft_model(base, peft_config, adapter_name=name)
        self.model.set_adapter(name)
        return self.model

    def saves_own_adapter(self, trainer, run_id: str) -> None:
        """The trainer's saves hold only the run's adapter, at the save's root, as a run alone writes it."""
        import torch
        from transformers.trainer import TRAINING_ARGS_NAME

        name = adapter_name(run_id)

        def save(output_dir: str | None = None, state_dict=None) -> None:
            target = Path(output_dir or trainer.args.output_dir)
            target.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target) as scratch:
                self.model.save_pretrained(scratch, selected_adapters=[name])
                for path in (Path(scratch) / name).iterdir():
                    os.replace(path, target / path.name)
            trainer.processing_class.save_pretrained(str(target))
            torch.save(trainer.args, target / TRAINING_ARGS_NAME)

        trainer._save = save

    # --- figures ---------------------------------------------------------------------------------------------

    def training(self, run_id: str) -> None:
        """The run's first update is about to be made."""
        with self._turns:
            if self._first_start is None:
                self._first_start = time.monotonic()
            self.tokens.setdefault(run_id, 0)

    def trained(self, run_id: str, tokens: int) -> None:
        with self._turns:
            self.tokens[run_id] = tokens

    def figures(self, run_id: str) -> dict[str, Any]:
        """What a run's cost says of the device it shared: the other runs, and every run's tokens/s together."""
        total, seconds = self._device_total()
        return {"runs": [other for other in self.run_ids if other != run_id],
                "deviceTokensPerSecond": round(total / seconds, 1) if seconds else None}

    def summary(self) -> str:
        total, seconds = self._device_total()
        rate = f"{total / seconds:.0f} tokens/s" if seconds else "no update made"
        return f"{total:,} tokens in {seconds:.1f}s, {rate} in all"

    def _device_total(self) -> tuple[int, float]:
        """Every run's tokens so far, and the seconds since the first one started training."""
        with self._turns:
            seconds = time.monotonic() - self._first_start if self._first_start is not None else 0.0
            return sum(self.tokens.values()), seconds


def _numpy_state():
    import numpy

    return numpy.random.get_state()


def _set_numpy_state(state) -> None:
    import numpy

    numpy.random.set_state(state)


def _sync_gradients() -> bool | None:
    from accelerate.state import GradientState

    return GradientState().sync_gradients if GradientState._shared_state else None


def _set_sync_gradients(value: bool | None) -> None:
    from accelerate.state import GradientState

    if value is not None:
        GradientState()._set_sync_gradients(value)


@dataclass(frozen=True)
class Seat:
    """One run's place on the shared base: what its worker and its engine call."""

    base: SharedBase
    run_id: str

    @property
    def adapter(self) -> str:
        return adapter_name(self.run_id)

    def held(self):
        return self.base.held(self.run_id)

    def adapted(self, model_dir: str, load, peft_config, seed: int, start_directory: Path | None):
        return self.base.adapted(self.run_id, model_dir, load, peft_config, seed, start_directory)

    def saves_own_adapter(self, trainer) -> None:
        self.base.saves_own_adapter(trainer, self.run_id)

    def figures(self) -> dict[str, Any]:
        return self.base.figures(self.run_id)

    def turns(self):
        """The trainer callback that hands the model over between the run's updates and counts its tokens."""
        from transformers import TrainerCallback

        base, run_id = self.base, self.run_id

        class Turns(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                base.training(run_id)

            def on_step_begin(self, args, state, control, **kwargs):
                base.next_turn(run_id)

            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "num_tokens" in logs:
                    base.trained(run_id, int(logs["num_tokens"]))

        return Turns()
