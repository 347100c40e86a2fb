"""The variables a worker reads as it imports its libraries, or reads at all: what a warm worker and a server that
forks workers from it must agree on, since a fork carries what was imported, and so how.

They are the OPTIMIZE_* settings declared as read by workers (`core.environment`; one only the server reads makes
no difference to a worker) and the machine-learning libraries' own variables, less those each server or job sets
for its workers at the fork (its lease token, its server file and cache, its devices).
"""

from __future__ import annotations

from optimize.core.environment import SETTINGS, WORKER

READ_BY_WORKERS = frozenset(entry.name for entry in SETTINGS if WORKER in entry.read_by)
LIBRARY_PREFIXES = ("HF_HUB_", "HF_HOME", "HF_DATASETS_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "PYTORCH_",
                    "OMP_", "MKL_", "OPENBLAS_", "CUDA_", "PYTHON")
PER_SERVER = ("OPTIMIZE_LEASE_TOKEN", "OPTIMIZE_SHARED_LEASES", "OPTIMIZE_SERVER_FILE", "OPTIMIZE_WORKER_CACHE",
              "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF")


def import_settings(env: dict[str, str]) -> dict[str, str]:
    """The variables of `env` a warm worker and the servers it forks for must agree on, sorted by name."""
    return {key: value for key, value in sorted(env.items()) if key not in PER_SERVER
            and (key in READ_BY_WORKERS if key.startswith("OPTIMIZE_") else key.startswith(LIBRARY_PREFIXES))}


def with_worker_defaults(env: dict[str, str]) -> dict[str, str]:
    """`env` as every worker runs with it: offline from the model hub unless it says otherwise, no tokenizer
    threads, no progress bars redrawn into its log (people read it with `logs`)."""
    return {**env, "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1"), "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_DISABLE_PROGRESS_BARS": env.get("HF_HUB_DISABLE_PROGRESS_BARS", "1")}
