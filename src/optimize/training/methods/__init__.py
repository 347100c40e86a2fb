"""Training methods, one module each (`sft`, `dpo`, `reinforcement` for grpo and gspo): a method is added by adding
its module and one line here.

`declared` is what admission reads first (a plan may name a method that is not trained, whose dataset rules still
apply); `method_for` is what trains: it refuses a method this deployment does not train, in the words a plan gets.
"""

from __future__ import annotations

from optimize.training.methods.base import HOLDS, Method, not_trained
from optimize.training.methods.dpo import DPO
from optimize.training.methods.reinforcement import GRPO, GSPO
from optimize.training.methods.sft import SFT

METHODS: dict[str, Method] = {method.name: method for method in (SFT, DPO, GRPO, GSPO)}


def trained() -> list[str]:
    """The methods this deployment trains, in the order a refusal lists them."""
    return [name for name, method in METHODS.items() if method.trained]


def declared(name: str) -> Method:
    """The method a plan names, trained or not; an unknown one is refused as an untrained one is."""
    if name not in METHODS:
        raise not_trained(name, trained())
    return METHODS[name]


def method_for(name: str) -> Method:
    """The method a run trains with; one this deployment does not train is refused."""
    method = declared(name)
    if not method.trained:
        raise not_trained(name, trained())
    return method


def rewarded() -> list[str]:
    """The methods whose runs are scored by reward terms: they record rollouts and are watched by guards."""
    return [name for name, method in METHODS.items() if method.rewarded]


def reader_of(kind: str) -> str | None:
    """The first trained method that reads datasets of `kind` (what a refusal suggests instead)."""
    return next((name for name, method in METHODS.items() if method.trained and method.dataset_kind == kind), None)


__all__ = ["HOLDS", "METHODS", "Method", "declared", "method_for", "reader_of", "rewarded", "trained"]
