"""A model allowed for serving only runs on one GPU a replica: endpoints and evaluations of it elsewhere are refused."""

from __future__ import annotations

import pytest

from optimize.catalog.catalog import check_replica_profile, load_catalog, shipped_catalog_path
from optimize.core.errors import Refused
from optimize.jobs.devices import DeviceProfile

CPU = DeviceProfile(name="cpu", kind="cpu", devices=1, accelerator=None)
H200 = DeviceProfile(name="h200", kind="gpu", devices=8, accelerator="NVIDIA H200")


def test_a_serving_only_model_needs_a_gpu_profile_and_names_the_ones_there_are():
    catalog = load_catalog(shipped_catalog_path())
    serving_only = catalog.find("google/gemma-4-26b-a4b-it")
    assert serving_only.serving_only
    with pytest.raises(Refused, match="allowed for serving only and runs on one GPU a replica") as refused:
        check_replica_profile(serving_only, CPU, [CPU, H200], "endpoint")
    assert "h200" in refused.value.hint
    with pytest.raises(Refused) as refused:
        check_replica_profile(serving_only, CPU, [CPU], "evaluation")
    assert "this deployment has none" in refused.value.hint
    check_replica_profile(serving_only, H200, [CPU, H200], "endpoint")  # one GPU a replica: admitted
    check_replica_profile(catalog.find("optimize/tiny-llama-3.2"), CPU, [CPU], "endpoint")  # trainable: anywhere
