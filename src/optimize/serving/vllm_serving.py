"""The vLLM serving engine (GPU, where the `vllm` package is installed): the calls of `engine.ServingModel` —
`stream`, `score`, `load_adapter`/`unload_adapter`, `adapters`, `stop_ids`, `batcher` (room and load reports) —
over vLLM's asynchronous engine, with its continuous batching, paged attention, multi-LoRA batches and prefix
caching. vLLM pins another torch than this project, so it lives in a GPU deployment's own environment (as the
evaluation engine `evaluation.vllm_engine` does); `engine.engine_for` picks it.

Prompts go in as token ids rendered by `optimize.chat`, so vLLM never templates them; answers come back as
token ids (vLLM detokenizes nothing), in steps the completers read exactly as they read the Transformers batcher's.
vLLM's engine runs on an asyncio loop of its own thread; each request is a task on it handing its tokens over to the
request's thread, and closing a request's steps aborts it in vLLM (its row is free at the next step).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from optimize.chat.grammars import Constraint
from optimize.serving.batcher import RequestTimedOut, Sequence, Step, Steps
from optimize.serving.load import EndpointLoad
from optimize.serving.sampling import Shaping


def available() -> bool:
    """True where vLLM is installed and a GPU is visible (the rule evaluations share, `workloads.engines`)."""
    from optimize.workloads.engines import vllm_available

    return vllm_available()


class VLLMSteps(Steps):
    """A request's steps from vLLM: closing them early aborts the request there."""

    def __init__(self, engine: VLLMServingModel, sequence: Sequence, request_id: str) -> None:
        super().__init__(engine.batcher, sequence)
        self.engine, self.request_id = engine, request_id

    def close(self) -> None:
        if not self.sequence.cancelled.is_set():
            self.sequence.cancel()
            asyncio.run_coroutine_threadsafe(self.engine.llm.abort(self.request_id), self.engine.loop)


class VLLMServingModel:
    def __init__(self, model_dir: str | Path, max_running: int, max_waiting: int, request_seconds: float,
                 max_adapters: int, max_lora_rank: int = 64, memory_fraction: float = 0.85) -> None:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="vllm", daemon=True)
        self._thread.start()
        arguments = AsyncEngineArgs(model=str(model_dir), dtype="bfloat16", seed=0, enable_lora=True,
                                    max_loras=max_adapters, max_lora_rank=max_lora_rank, max_num_seqs=max_running,
                                    enable_prefix_caching=True, gpu_memory_utilization=memory_fraction,
                                    **_guidance_backend(AsyncEngineArgs))

        async def start():
            return AsyncLLM.from_engine_args(arguments)

        self.llm = self._run(start())
        self.batcher = EndpointLoad(max_running, max_waiting)
        self.request_seconds = request_seconds
        self.adapters: dict[str, Any] = {}  # served name -> vLLM's LoRARequest
        self._ids = itertools.count(1)
        self.model_dir = Path(model_dir)
        self.stop_ids = _stop_ids(self.model_dir, self.llm)
        self.constrains = True  # structured outputs: vLLM's llguidance backend decodes under the request's grammar

    def _run(self, coroutine, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.llm.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)

    def load_adapter(self, name: str, directory: Path) -> None:
        from vllm.lora.request import LoRARequest

        request = LoRARequest(name, next(self._ids), str(directory))
        self._run(self.llm.add_lora(request))
        self.adapters[name] = request

    def unload_adapter(self, name: str) -> None:
        request = self.adapters.pop(name, None)
        if request is not None:
            self._run(self.llm.remove_lora(request.lora_int_id))

    def stream(self, adapter: str | None, prompt: list[int], max_new_tokens: int, temperature: float = 0.0,
               top_p: float = 1.0, seed: int | None = None, top_logprobs: int | None = None,
               shaping: Shaping | None = None, constraint: Constraint | None = None) -> Steps:
        """As the Transformers engine's; `shaping` becomes vLLM's own sampling parameters of the same names, and
        `constraint` its structured outputs (the grammar's Lark text, compiled by its llguidance backend)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        sequence = Sequence(adapter, list(prompt), max_new_tokens, temperature, top_p, seed, top_logprobs)
        self.batcher.admit()
        sequence.submitted = time.monotonic()
        shaping = shaping or Shaping()
        params = SamplingParams(temperature=temperature, top_p=top_p, seed=seed, max_tokens=max_new_tokens,
                                stop_token_ids=list(self.stop_ids), logprobs=top_logprobs, detokenize=False,
                                output_kind=RequestOutputKind.DELTA, top_k=shaping.top_k or -1,
                                min_p=shaping.min_p, repetition_penalty=shaping.repetition_penalty,
                                presence_penalty=shaping.presence_penalty,
                                frequency_penalty=shaping.frequency_penalty, logit_bias=shaping.logit_bias or None,
                                **_structured(constraint))
        request_id = secrets.token_hex(8)
        lora = self.adapters.get(adapter) if adapter is not None else None
        asyncio.run_coroutine_threadsafe(self._generate(sequence, params, request_id, lora), self.loop)
        return VLLMSteps(self, sequence, request_id)

    async def _generate(self, sequence: Sequence, params, request_id: str, lora) -> None:
        error: BaseException | None = None
        try:
            async with asyncio.timeout(max(0.0, self.request_seconds - (time.monotonic() - sequence.submitted))):
                async for output in self.llm.generate({"prompt_token_ids": sequence.prompt}, params,
                                                      request_id=request_id, lora_request=lora):
                    sequence.cached = output.num_cached_tokens or 0
                    answer = output.outputs[0]
                    for index, token in enumerate(answer.token_ids):
                        sequence.steps.put(_step(token, answer.logprobs[index] if answer.logprobs else None,
                                                 sequence.top_logprobs))
                        sequence.generated += 1
                        sequence.last = token
                    if output.finished and answer.finish_reason == "stop" and isinstance(answer.stop_reason, int) \
                            and sequence.last != answer.stop_reason:
                        sequence.steps.put(Step(answer.stop_reason))  # the stop token it ended at
                        sequence.generated += 1
        except TimeoutError:
            await self.llm.abort(request_id)
            error = RequestTimedOut(f"the request ran past this endpoint's limit of {self.request_seconds:g} s "
                                    "(OPTIMIZE_ENDPOINT_REQUEST_SECONDS); ask for fewer tokens")
        except Exception as failed:  # noqa: BLE001 - the request's reader gets it
            error = failed
        if error is not None:
            sequence.steps.put(error)
        sequence.steps.put(None)
        self.batcher.finished(sequence.submitted, sequence.generated)

    def score(self, adapter: str | None, ids: list[int], top: int = 0) -> list[Step]:
        """Each token of `ids` after the first, with its log-probability given the ones before it (and the `top`
        likeliest alternatives)."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=top, detokenize=False)
        lora = self.adapters.get(adapter) if adapter is not None else None

        async def scored():
            last = None
            async for output in self.llm.generate({"prompt_token_ids": list(ids)}, params,
                                                  request_id=secrets.token_hex(8), lora_request=lora):
                last = output
            return last.prompt_logprobs

        entries = self._run(scored(), timeout=self.request_seconds)
        return [_step(token, entries[index], top) for index, token in enumerate(ids) if index > 0]


def _step(token: int, logprobs: dict | None, top: int | None) -> Step:
    """A step from vLLM's log-probabilities of one position ({token: Logprob(logprob, rank, ...)})."""
    if top is None or logprobs is None:
        return Step(token)
    ranked = sorted(((t, lp) for t, lp in logprobs.items() if lp.rank is not None and lp.rank <= top),
                    key=lambda item: item[1].rank)
    return Step(token, float(logprobs[token].logprob), tuple((t, float(lp.logprob)) for t, lp in ranked[:top]))


def _guidance_backend(arguments: type) -> dict[str, Any]:
    """The engine argument that makes llguidance vLLM's structured-output backend (its name moved between vLLM
    releases): our grammars are llguidance's Lark, which the default backend (xgrammar) does not read."""
    names = set(getattr(arguments, "__dataclass_fields__", {}))
    if "structured_outputs_config" in names:
        return {"structured_outputs_config": {"backend": "guidance"}}
    if "guided_decoding_backend" in names:
        return {"guided_decoding_backend": "guidance"}
    return {}


def _structured(constraint: Constraint | None) -> dict[str, Any]:
    """The sampling parameter holding a request's grammar, as this vLLM spells it."""
    if constraint is None:
        return {}
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(grammar=constraint.lark)}
    except ImportError:  # releases before structured outputs were renamed
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(grammar=constraint.lark)}


def _stop_ids(model_dir: Path, llm) -> list[int]:
    """The model's stop tokens: its generation config's, else the tokenizer's end of sequence."""
    stops = None
    generation = model_dir / "generation_config.json"
    if generation.is_file():
        stops = json.loads(generation.read_text()).get("eos_token_id")
    if stops is None:
        stops = llm.tokenizer.eos_token_id if getattr(llm, "tokenizer", None) is not None else None
    return [stops] if isinstance(stops, int) else list(stops or [])
