"""Registry models: list, get a version, versions (filled in by the registry models work)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/registry/models", tags=["registry"])
