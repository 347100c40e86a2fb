"""The serving engine of an endpoint: one resident base model, LoRA adapters loaded beside it under their served
names, and generation by continuous batching (`serving.batcher`): concurrent requests, for the base model or any
adapter, decode together in one batch.

Prompts arrive as token ids rendered by `optimize.chat` (the serving path renders exactly as training does), so
the engine applies no template of its own. Adapters attach and detach while the endpoint answers; a lock keeps a
load from running under a decoding step.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from optimize.chat.generation import device_and_dtype, stop_and_pad_ids
from optimize.chat.grammars import Constraint
from optimize.core.environment import setting
from optimize.serving.batcher import Batcher, Sequence, Step, Steps
from optimize.serving.load import MAX_ADAPTERS
from optimize.serving.prefix_cache import PrefixCache
from optimize.serving.sampling import Shaping

MAX_RUNNING: int = setting("OPTIMIZE_ENDPOINT_BATCH")  # rows that decode together
MAX_WAITING: int = setting("OPTIMIZE_ENDPOINT_QUEUE")  # requests that wait for a row; then 429
# prompt tokens kept for requests that begin the same way (serving.prefix_cache); 0 keeps none
PREFIX_TOKENS: int = setting("OPTIMIZE_ENDPOINT_PREFIX_TOKENS")
REQUEST_SECONDS: float = setting("OPTIMIZE_ENDPOINT_REQUEST_SECONDS")  # then the request is cut
ENGINES = ("auto", "transformers", "vllm")


def engine_for(model_dir: str | Path):
    """The endpoint's engine (OPTIMIZE_ENDPOINT_ENGINE): vllm, or auto where vLLM is installed and a GPU is visible
    (`serving.vllm_serving`); else this module's Transformers engine with continuous batching."""
    choice = setting("OPTIMIZE_ENDPOINT_ENGINE")  # one of ENGINES, or refused naming the variable
    from optimize.serving import vllm_serving

    if choice == "vllm" and not vllm_serving.available():
        raise RuntimeError("OPTIMIZE_ENDPOINT_ENGINE is vllm, but vLLM is not installed here or no GPU is visible; "
                           "install vllm in the GPU deployment's environment, or set it to auto")
    if choice == "vllm" or (choice == "auto" and vllm_serving.available()):
        return vllm_serving.VLLMServingModel(model_dir, MAX_RUNNING, MAX_WAITING, REQUEST_SECONDS, MAX_ADAPTERS)
    return ServingModel(model_dir)


class ServingModel:
    def __init__(self, model_dir: str | Path, precision: str | None = None) -> None:
        import torch
        from transformers import AutoTokenizer

        from optimize.chat.vision import ImageTokens, auto_model, takes_images

        self.torch = torch
        self.device, self.precision, dtype = device_and_dtype(precision)  # bf16 on a GPU, fp32 on the cpu
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.base = auto_model(model_dir).from_pretrained(str(model_dir), dtype=dtype).to(self.device).eval()
        # a model that takes images: its processor prepares a prompt's pixels when the prompt is prefilled
        self.images = ImageTokens.from_pretrained(model_dir) if takes_images(model_dir) else None
        self.reads_images = self.images is not None
        self._matchers = None  # llguidance's tokenizer, built when the first constrained request comes
        self.constrains = True  # it decodes under a grammar (`serving.structured`)
        self.peft = None  # the PeftModel around the base, once an adapter is loaded
        self.adapters: dict[str, str] = {}  # served name -> PEFT adapter key
        self.stacked = None  # the loaded adapters' LoRA weights stacked (`serving.stacked_lora`), where they stack
        self.lock = threading.Lock()
        self.stop_ids, self.pad_id = stop_and_pad_ids(self.base, self.tokenizer)
        self.prefixes = PrefixCache(PREFIX_TOKENS) if PREFIX_TOKENS > 0 else None
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
            self._restack()

    def unload_adapter(self, name: str) -> None:
        with self.lock:
            key = self.adapters.pop(name, None)
            if key is not None and self.adapters:  # PEFT keeps at least one adapter; the last one stays unserved
                self.peft.set_adapter(next(iter(self.adapters.values())))
                self.peft.delete_adapter(key)
            self._restack()

    def _restack(self) -> None:
        from optimize.serving.stacked_lora import stack

        if self.prefixes is not None:  # kept prefixes were computed with the adapters loaded then
            self.prefixes.clear()
        if self.stacked is not None:
            self.stacked.remove()
        self.stacked = stack(self.torch, self.base, list(self.adapters.values())) if self.adapters else None

    def forward(self, adapters: list[str | None], **arguments):
        """The model's logits for a batch whose rows each answer as their own adapter (None: the base model)."""
        if self.peft is None:
            return self.base(**arguments).logits
        keys = [self.adapters[a] if a is not None else None for a in adapters]
        if self.stacked is not None:
            with self.stacked.rows(keys):
                return self.base(**arguments).logits
        return self.peft(**arguments, adapter_names=[key or "__base__" for key in keys]).logits

    def stream(self, adapter: str | None, prompt: list[int], max_new_tokens: int, temperature: float = 0.0,
               top_p: float = 1.0, seed: int | None = None, top_logprobs: int | None = None,
               images: tuple[str, ...] = (), shaping: Shaping | None = None,
               constraint: Constraint | None = None) -> Steps:
        """The answer's steps as they are generated, the stop token included; `adapter` None is the base; `images`
        the files the prompt's image tokens stand for; `shaping` its biases, penalties, top_k and min_p;
        `constraint` the grammar its answer keeps to. Raises `QueueFull` at once when the endpoint has no room for
        it; closing the iterator early frees its row."""
        sequence = Sequence(adapter, list(prompt), max_new_tokens, temperature, top_p, seed, top_logprobs,
                            images=tuple(images), shaping=shaping if shaping is not None and shaping.shapes else None,
                            matcher=self._matcher(constraint) if constraint is not None else None)
        self.batcher.submit(sequence)
        return self.batcher.steps(sequence)

    def _matcher(self, constraint: Constraint):
        if self._matchers is None:
            from optimize.chat.grammars import Matchers

            vocabulary = self.base.get_output_embeddings().weight.shape[0]  # the logits' width
            self._matchers = Matchers(self.tokenizer, vocabulary, self.stop_ids)
        return self._matchers.matcher(constraint)

    def score(self, adapter: str | None, ids: list[int], top: int = 0) -> list[Step]:
        """Each token of `ids` after the first, with its log-probability given the ones before it (and the `top`
        likeliest alternatives): what a log-likelihood evaluation reads from an echoed prompt."""
        torch = self.torch
        with self.lock, torch.inference_mode():
            tensor = torch.tensor([ids], device=self.device)
            logits = self.forward([adapter], input_ids=tensor, attention_mask=torch.ones_like(tensor))
            logprobs = torch.log_softmax(logits[0, :-1].float(), dim=-1)
            chosen = logprobs.gather(1, tensor[0, 1:, None])[:, 0].tolist()
            tops = logprobs.topk(top, dim=-1) if top else None
        return [Step(token, value, tuple(zip(tops.indices[i].tolist(), tops.values[i].tolist(), strict=True))
                     if tops is not None else ())
                for i, (token, value) in enumerate(zip(ids[1:], chosen, strict=True))]
