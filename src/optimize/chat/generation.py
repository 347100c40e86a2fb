"""Generation from rendered prompts with Transformers: prompts as token ids in (rendered and tokenized by the chat
core, so the engine never applies a template of its own), answers out — greedy and batched, or several sampled
answers per prompt (`sample`, seeded). Prompts are grouped by length and left-padded, a batch at a time, with a
LoRA adapter over the base when one is given. Used by evaluations (`optimize.evaluation.generation`, which adds the
vLLM engine on GPUs) and by a reinforcement run's judge terms (`optimize.training.methods.judging`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def device_and_dtype(precision: str | None = None) -> tuple[str, str, object]:
    """Where this process computes and how a model loads: (device, precision, torch dtype). `precision` when given;
    otherwise bf16 on a GPU (fp16 where the GPU has no bf16) and fp32 on the cpu — a served or evaluated model is
    not trained, and fp32 on a GPU only halves its speed and doubles its memory."""
    import torch

    cuda = torch.cuda.is_available()
    if precision is None:
        precision = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if cuda else "fp32"
    return ("cuda" if cuda else "cpu"), precision, getattr(torch, DTYPES[precision])


@dataclass(frozen=True)
class Answer:
    text: str
    tokens: int  # generated tokens, the stop token included


def answer_text(text: str) -> str:
    """A generated text as it is kept: stripped, and a NUL (which a byte-level tokenizer can decode, and which the
    server refuses in any text it stores) shown as U+FFFD, so one odd token never fails an evaluation."""
    return text.strip().replace("\x00", "\ufffd")


def stop_and_pad_ids(model, tokenizer) -> tuple[list[int], int]:
    """The tokens an answer stops at (the model's generation config and the tokenizer's end of sequence), and the
    token prompts are padded with."""
    stops = model.generation_config.eos_token_id
    stops = [stops] if isinstance(stops, int) else list(stops or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in stops:
        stops.append(tokenizer.eos_token_id)
    return stops, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]


class TransformersGenerator:
    def __init__(self, model_dir: str | Path, adapter_dir: str | Path | None = None,
                 precision: str | None = None) -> None:
        import torch
        from transformers import AutoTokenizer

        from optimize.chat.vision import ImageTokens, auto_model, takes_images

        self.torch = torch
        self.device, self.precision, dtype = device_and_dtype(precision)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model = auto_model(model_dir).from_pretrained(str(model_dir), dtype=dtype).to(self.device)
        # a model that takes images: a prompt's image files are prepared by its processor, a batch at a time
        self.images = ImageTokens.from_pretrained(model_dir) if takes_images(model_dir) else None
        if adapter_dir is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter_dir))
        self.model = model.eval()
        self.stop_ids, self.pad_id = stop_and_pad_ids(self.model, self.tokenizer)
        self._matchers = None  # llguidance's tokenizer of the model, built for the first constrained batch

    def generate(self, prompts: list[list[int]], max_new_tokens: int = 256, batch_size: int = 8,
                 images: list[tuple[str, ...]] | None = None, constraint: Any = None) -> list[Answer]:
        """Greedy answers, in the prompts' order; `images`: each prompt's image files (a model that takes them);
        `constraint`: the grammar every answer keeps to (`chat.grammars`)."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        answers: dict[int, Answer] = {}
        for start in range(0, len(order), batch_size):
            chosen = order[start:start + batch_size]
            files = [images[i] for i in chosen] if images else None
            for index, answer in zip(chosen, self._batch([prompts[i] for i in chosen], max_new_tokens, images=files,
                                                         constraint=constraint), strict=True):
                answers[index] = answer
        return [answers[i] for i in range(len(prompts))]

    def sample(self, prompts: list[list[int]], max_new_tokens: int, n: int, temperature: float, seed: int,
               batch_size: int = 8, images: list[tuple[str, ...]] | None = None,
               constraint: Any = None) -> list[list[Answer]]:
        """`n` answers per prompt sampled at `temperature`, in the prompts' order. Each batch is seeded from `seed`
        and its first prompt's place, so the same prompts answer the same on a retry."""
        groups: list[list[Answer]] = []
        for start in range(0, len(prompts), batch_size):
            self.torch.manual_seed(seed + start)
            files = images[start:start + batch_size] if images else None
            flat = self._batch(prompts[start:start + batch_size], max_new_tokens, n, temperature, files, constraint)
            groups.extend(flat[i:i + n] for i in range(0, len(flat), n))
        return groups

    def _pixels(self, images: list[tuple[str, ...]] | None) -> dict:
        """The batch's pixel values, a prompt's for each of its answers (`generate` repeats them); none without
        images."""
        if self.images is None or not images or not any(images):
            return {}
        pixels = self.images.pixels([list(files) for files in images])
        return {"pixel_values": pixels["pixel_values"].to(self.device, self.model.dtype),
                "pixel_attention_mask": pixels["pixel_attention_mask"].to(self.device)}

    def _held(self, constraint: Any, rows: int) -> dict:
        """`generate`'s logits processor holding each of `rows` answers to the constraint's grammar (none without
        one)."""
        if constraint is None:
            return {}
        from transformers import LogitsProcessorList

        from optimize.chat.grammars import Matchers

        if self._matchers is None:
            vocabulary = self.model.get_output_embeddings().weight.shape[0]
            self._matchers = Matchers(self.tokenizer, vocabulary, self.stop_ids)
        held = GrammarLogits(self.torch, [self._matchers.matcher(constraint) for _ in range(rows)], self.stop_ids)
        return {"logits_processor": LogitsProcessorList([held])}

    def _batch(self, prompts: list[list[int]], max_new_tokens: int, n: int = 1, temperature: float = 0.0,
               images: list[tuple[str, ...]] | None = None, constraint: Any = None) -> list[Answer]:
        torch = self.torch
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0,
                    "num_return_sequences": n} if temperature > 0 else {"do_sample": False}
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                      pad_token_id=self.pad_id, eos_token_id=self.stop_ids, **sampling,
                                      **self._pixels(images), **self._held(constraint, len(prompts) * n))
        answers = []
        for row in out[:, width:].tolist():
            kept = []
            for token in row:
                kept.append(token)
                if token in self.stop_ids:
                    break
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            answers.append(Answer(answer_text(text), len(kept)))
        return answers


class GrammarLogits:
    """A `generate` logits processor holding each row of the batch to its grammar (`chat.grammars.RowMatcher`): from
    the second step on, each row's matcher takes the token the row picked; a row that has stopped is left alone."""

    def __init__(self, torch, rows: list, stop_ids: list[int]) -> None:
        self.torch, self.rows, self.stops = torch, rows, set(stop_ids)
        self.started, self.done = False, [False] * len(rows)

    def __call__(self, input_ids, scores):
        from optimize.chat.grammars import allowed

        torch = self.torch
        if self.started:
            for row, matcher in enumerate(self.rows):
                token = int(input_ids[row, -1])
                if not self.done[row] and token in self.stops:
                    self.done[row] = True
                elif not self.done[row]:
                    matcher.advance(token)
        self.started = True
        live = [row for row in range(len(self.rows)) if not self.done[row]]
        if live:
            permitted = allowed(torch, [self.rows[row] for row in live]).to(scores.device)
            index = torch.tensor(live, device=scores.device)
            held = torch.full((len(live), scores.shape[1]), float("-inf"), dtype=scores.dtype, device=scores.device)
            width = min(permitted.shape[1], scores.shape[1])
            held[:, :width] = scores[index, :width].masked_fill(~permitted[:, :width], float("-inf"))
            scores = scores.clone()
            scores[index] = held
        return scores
