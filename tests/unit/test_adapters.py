"""An adapter's weights digest, read without torch, equals the digest defined over torch tensors."""

from __future__ import annotations

import hashlib
import json

import torch
from safetensors.torch import save_file

from optimize.training.adapters import adapted_modules, weights_digest


def torch_digest(tensors: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return "sha256:" + digest.hexdigest()


def test_the_digest_read_from_the_file_equals_the_one_over_its_tensors(tmp_path):
    generator = torch.Generator().manual_seed(0)
    tensors = {"b.lora_A.weight": torch.randn(8, 16, generator=generator),
               "a.lora_B.weight": torch.randn(16, 8, generator=generator).to(torch.bfloat16),
               "c.scale": torch.tensor([3], dtype=torch.int64)}
    save_file(tensors, str(tmp_path / "adapter_model.safetensors"), metadata={"format": "pt"})
    assert weights_digest(tmp_path / "adapter_model.safetensors") == torch_digest(tensors)
    tensors["c.scale"] = torch.tensor([4], dtype=torch.int64)
    save_file(tensors, str(tmp_path / "other.safetensors"))
    assert weights_digest(tmp_path / "other.safetensors") != weights_digest(tmp_path / "adapter_model.safetensors")


def test_the_modules_an_adapter_targets(tmp_path):
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps({"target_modules": ["model.layers.0.self_attn.v_proj", "q_proj", "v_proj"]}))
    assert adapted_modules(path) == ["q_proj", "v_proj"]
    path.write_text(json.dumps({"target_modules": "o_proj"}))
    assert adapted_modules(path) == ["o_proj"]
