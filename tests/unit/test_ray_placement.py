"""How the Ray executor names what nodes offer and what a grant needs (`jobs.ray_executor`): a node's profiles are
`optimize/PROFILE` resources (a cpu profile's serving slots `optimize/PROFILE/serving`), a grant asks a unit per
device of the matching resource, and GPUs themselves on a gpu profile."""

from __future__ import annotations

from optimize.jobs.leases import Grant
from optimize.jobs.ray_executor import _offered, _placement, node_resources


def test_a_node_offers_its_profiles_and_a_cpu_profile_s_serving_slots():
    assert node_resources("cpu", 2) == {"optimize/cpu": 2.0, "optimize/cpu/serving": 2.0}
    assert node_resources("h200", 8, "gpu") == {"optimize/h200": 8.0}
    resources = {**node_resources("cpu", 2), **node_resources("h200", 8, "gpu"), "CPU": 16.0, "GPU": 8.0,
                 "node:10.0.0.2": 1.0}
    assert _offered(resources) == {"cpu": 2, "h200": 8}  # serving slots are not more devices


def test_a_grant_asks_a_unit_of_its_profile_per_device():
    assert _placement(Grant("t", ["cpu:1"], "cpu")) == {"resources": {"optimize/cpu": 1.0}}
    assert _placement(Grant("t", ["cpu:serving:0"], "cpu")) == {"resources": {"optimize/cpu/serving": 1.0}}
    assert _placement(Grant("t", ["h200:0", "h200:3"], "gpu")) == {"resources": {"optimize/h200": 2.0},
                                                                    "num_gpus": 2}
    assert _placement(Grant("t", [], "cpu")) == {}  # work that needs no device goes anywhere
