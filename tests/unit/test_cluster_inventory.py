"""What the scheduler grants on a cluster (`Deployment.refresh_inventory`, `scheduler.free_devices`): a profile grows
to what the live nodes offer and keeps its declaration when they offer less; a profile found only on the cluster
joins; no more devices are granted than the live nodes offer beyond what is held, nor more to one job than one node
offers; on one machine (an executor that says nothing about nodes) every declared device may be granted."""

from __future__ import annotations

from pathlib import Path

from optimize.core.clock import utcnow
from optimize.deployment import Deployment
from optimize.jobs.devices import DeviceProfile
from optimize.jobs.scheduler import free_devices
from optimize.store.tables import DeviceHold
from tests.conftest import migrated_store

CPU = DeviceProfile(name="cpu", kind="cpu", devices=1)
ALT = DeviceProfile(name="alt", kind="cpu", devices=1)


class Nodes:
    """What a cluster executor's live nodes offer (the Ray executor reads it from `ray.nodes()`)."""

    name = "cluster"

    def __init__(self, offered: list[DeviceProfile] | None, most: dict[str, int] | None = None) -> None:
        self.offered, self.most = offered, most

    def online(self) -> list[DeviceProfile] | None:
        return self.offered

    def most_on_one_node(self) -> dict[str, int] | None:
        return self.most


def deployment(tmp_path: Path, offered: list[DeviceProfile] | None, most: dict[str, int] | None = None
               ) -> Deployment:
    made = Deployment(migrated_store("sqlite", tmp_path), None, [CPU, ALT], tmp_path, None)
    made.executor = Nodes(offered, most)
    made.refresh_inventory()
    return made


def test_profiles_follow_what_the_live_nodes_offer(tmp_path):
    made = deployment(tmp_path, [DeviceProfile(name="cpu", kind="cpu", devices=2),
                                 DeviceProfile(name="h200", kind="gpu", devices=8)])
    assert {p.name: p.devices for p in made.profiles} == {"cpu": 2, "alt": 1, "h200": 8}  # grown, kept, joined
    assert made.online == {"cpu": 2, "h200": 8}  # alt: no live node offers it now
    assert made.profiles[0].name == "h200"  # GPUs first, as the inventory lists them


def test_no_more_devices_are_granted_than_the_live_nodes_offer_beyond_what_is_held(tmp_path):
    made = deployment(tmp_path, [DeviceProfile(name="cpu", kind="cpu", devices=2)])
    cpu = next(p for p in made.profiles if p.name == "cpu")
    with made.store.transaction() as session:
        assert free_devices(session, cpu, "training", made.online) == ["cpu:0", "cpu:1"]
        assert free_devices(session, cpu, "training", {"cpu": 1}) == ["cpu:0"]  # a node left
        session.add(DeviceHold(device_id="cpu:0", subject="run:r1", kind="sft", project=None, since=utcnow()))
        session.flush()
        assert free_devices(session, cpu, "training", {"cpu": 1}) == []  # the one online is held
        assert free_devices(session, cpu, "training", {"cpu": 2}) == ["cpu:1"]
        alt = next(p for p in made.profiles if p.name == "alt")
        assert free_devices(session, alt, "training", made.online) == []  # declared, offered by no live node


def test_one_machine_grants_every_declared_device(tmp_path):
    made = deployment(tmp_path, None)
    assert made.profiles == [CPU, ALT] and made.online is None
    with made.store.transaction() as session:
        assert free_devices(session, CPU, "training", made.online) == ["cpu:0"]


def test_a_job_s_devices_must_all_be_on_one_node(tmp_path):
    made = deployment(tmp_path, [DeviceProfile(name="cpu", kind="cpu", devices=2)], most={"cpu": 1})
    assert made.online == {"cpu": 2} and made.one_node == {"cpu": 1}  # two nodes of one slot each
    assert made.fits_one_node("cpu", 1) and not made.fits_one_node("cpu", 2) and not made.fits_one_node("alt", 1)
    (tmp_path / "one").mkdir()
    assert deployment(tmp_path / "one", None).fits_one_node("cpu", 8)  # one machine: nothing to split
