"""Whether a generation engine can run in this process: vLLM, where it is installed and a GPU is visible.
Evaluations and endpoints both ask before they build one."""

from __future__ import annotations


def vllm_available() -> bool:
    """True where vLLM is installed and a GPU is visible to this job."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()
