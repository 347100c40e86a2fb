"""Optimize: a self-hosted post-training platform for open-weight language models."""

__version__ = "0.9.0"
__all__ = ["__version__"]
