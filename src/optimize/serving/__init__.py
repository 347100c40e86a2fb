"""Serving: endpoints (a resident base model plus LoRA adapters on a device) and the OpenAI-compatible chat
completions that route to them."""
