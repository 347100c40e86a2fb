"""A model allowed for serving only runs on one GPU a replica: endpoints, evaluations and distillations of it
elsewhere are refused; a replica's profile is the one asked for, else where the catalog serves the model, else cpu."""

from __future__ import annotations

import pytest

from optimize.catalog.catalog import check_replica_profile, load_catalog, replica_profile, shipped_catalog_path
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


def test_a_replica_s_profile_is_the_one_asked_else_where_the_catalog_serves_it_else_cpu():
    catalog = load_catalog(shipped_catalog_path())
    serving_only, tiny = catalog.find("google/gemma-4-26b-a4b-it"), catalog.find("optimize/tiny-llama-3.2")
    assert replica_profile(tiny, [CPU, H200], None, "endpoint") == "cpu"
    assert replica_profile(tiny, [CPU, H200], "h200", "distillation") == "h200"
    with pytest.raises(Refused, match="'a100' is not a device profile") as refused:
        replica_profile(tiny, [CPU], "a100", "distillation")
    assert refused.value.hint == "profiles here: cpu"
    with pytest.raises(Refused, match="a distillation of it cannot use profile 'cpu'"):
        replica_profile(serving_only, [CPU], None, "distillation")
