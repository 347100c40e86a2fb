"""The serving engine of an endpoint: one resident base model, LoRA adapters loaded beside it under their served
names, and generation token by token (Transformers `generate` with a streamer), one request at a time.

Prompts arrive as token ids rendered by `optimize.chat` (the serving path renders exactly as training does), so
the engine applies no template of its own. Adapters attach and detach while the endpoint answers; a lock keeps a
load from running under a generation.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

from optimize.chat.generation import device_and_dtype, stop_and_pad_ids


class _TokenQueue:
    """A Transformers streamer that hands over each generated token id (the prompt, sent first, is skipped)."""

    def __init__(self) -> None:
        self.items: queue.Queue = queue.Queue()
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self.items.put(token)

    def end(self) -> None:
        self.items.put(None)


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
               top_p: float = 1.0) -> Iterator[int]:
        """The answer's token ids as they are generated, the stop token included; `adapter` None is the base."""
        streamer = _TokenQueue()
        failure: list[BaseException] = []

        def generate() -> None:
            torch = self.torch
            try:
                with self.lock, torch.inference_mode():
                    ids = torch.tensor([prompt], device=self.device)
                    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 \
                        else {"do_sample": False}
                    arguments = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                     pad_token_id=self.pad_id, eos_token_id=self.stop_ids, streamer=streamer,
                                     **sampling)
                    if adapter is None and self.peft is not None:
                        with self.peft.disable_adapter():
                            self.peft.generate(**arguments)
                    elif adapter is None:
                        self.base.generate(**arguments)
                    else:
                        self.peft.set_adapter(self.adapters[adapter])
                        self.peft.generate(**arguments)
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                failure.append(error)
                streamer.end()

        worker = threading.Thread(target=generate, name="generate", daemon=True)
        worker.start()
        while (token := streamer.items.get()) is not None:
            yield token
            if token in self.stop_ids:
                break
        worker.join()
        if failure:
            raise failure[0]
