"""The serving engine of an endpoint: one resident base model, LoRA adapters loaded beside it under their served
names, and generation by continuous batching (`serving.batcher`): concurrent requests, for the base model or any
adapter, decode together in one batch.

Prompts arrive as token ids rendered by `optimize.chat` (the serving path renders exactly as training does), so
the engine applies no template of its own. Adapters attach and detach while the endpoint answers; a lock keeps a
load from running under a decoding step.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from optimize.chat.generation import device_and_dtype, stop_and_pad_ids
from optimize.serving.batcher import Batcher, Sequence, Step, Steps

MAX_RUNNING = int(os.environ.get("OPTIMIZE_ENDPOINT_BATCH", "16"))  # rows that decode together
MAX_WAITING = int(os.environ.get("OPTIMIZE_ENDPOINT_QUEUE", "64"))  # requests that wait for a row; then 429
REQUEST_SECONDS = float(os.environ.get("OPTIMIZE_ENDPOINT_REQUEST_SECONDS", "600"))  # then the request is cut


class ServingModel:
    def __init__(self, model_dir: str | Path, precision: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.device, self.precision, dtype = device_and_dtype(precision)  # bf16 on a GPU, fp32 on the cpu
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).to(self.device).eval()
        self.peft = None  # the PeftModel around the base, once an adapter is loaded
        self.adapters: dict[str, str] = {}  # served name -> PEFT adapter key
        self.lock = threading.Lock()
        self.stop_ids, self.pad_id = stop_and_pad_ids(self.base, self.tokenizer)
        self.batcher = Batcher(self, MAX_RUNNING, MAX_WAITING, REQUEST_SECONDS)

    def close(self) -> None:
        self.batcher.close()

    def load_adapter(self, name: str, directory: Path) -> None:
        key = "adapter_" + hashlib.sha256(name.encode()).hexdigest()[:16]  # PEFT keys cannot hold '/', ':' or '.'
        with self.lock:
            if self.peft is None:
                from peft import PeftModel

                self.peft = PeftModel.from_pretrained(self.base, str(directory), adapter_name=key).eval()
            else:
                self.peft.load_adapter(str(directory), adapter_name=key)
            self.adapters[name] = key

    def unload_adapter(self, name: str) -> None:
        with self.lock:
            key = self.adapters.pop(name, None)
            if key is not None and self.adapters:  # PEFT keeps at least one adapter; the last one stays unserved
                self.peft.set_adapter(next(iter(self.adapters.values())))
                self.peft.delete_adapter(key)

    def stream(self, adapter: str | None, prompt: list[int], max_new_tokens: int, temperature: float = 0.0,
               top_p: float = 1.0, seed: int | None = None, top_logprobs: int | None = None) -> Steps:
        """The answer's steps as they are generated, the stop token included; `adapter` None is the base. Raises
        `QueueFull` at once when the endpoint has no room for it; closing the iterator early frees its row."""
        sequence = Sequence(adapter, list(prompt), max_new_tokens, temperature, top_p, seed, top_logprobs)
        self.batcher.submit(sequence)
        return self.batcher.steps(sequence)

    def score(self, adapter: str | None, ids: list[int], top: int = 0) -> list[Step]:
        """Each token of `ids` after the first, with its log-probability given the ones before it (and the `top`
        likeliest alternatives): what a log-likelihood evaluation reads from an echoed prompt."""
        torch = self.torch
        with self.lock, torch.inference_mode():
            tensor = torch.tensor([ids], device=self.device)
            arguments = dict(input_ids=tensor, attention_mask=torch.ones_like(tensor))
            if self.peft is None:
                logits = self.base(**arguments).logits
            else:
                names = [self.adapters[adapter] if adapter is not None else "__base__"]
                logits = self.peft(**arguments, adapter_names=names).logits
            logprobs = torch.log_softmax(logits[0, :-1].float(), dim=-1)
            chosen = logprobs.gather(1, tensor[0, 1:, None])[:, 0].tolist()
            tops = logprobs.topk(top, dim=-1) if top else None
        return [Step(token, value, tuple(zip(tops.indices[i].tolist(), tops.values[i].tolist(), strict=True))
                     if tops is not None else ())
                for i, (token, value) in enumerate(zip(ids[1:], chosen, strict=True))]
