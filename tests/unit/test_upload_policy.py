"""The save upload queue's policy: weights only while newer saves wait, training state at bounded intervals,
the newest and each epoch's save in full."""

from __future__ import annotations

from pathlib import Path

from optimize.worker.upload_policy import FULL, WEIGHTS, Save, UploadPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def saves(*steps: int, epoch_end: tuple[int, ...] = ()) -> list[Save]:
    return [Save(step, Path(f"/tmp/checkpoint-{step}"), epoch_end=step in epoch_end) for step in steps]


def plan(decision) -> tuple[list[tuple[int, str]], list[int]]:
    return [(s.step, mode) for s, mode in decision.uploads], [s.step for s in decision.skipped]


def test_a_save_alone_in_the_queue_uploads_in_full():
    assert plan(UploadPolicy(10, 300, Clock()).choose(saves(5), stopping=False)) == ([(5, FULL)], [])


def test_a_save_with_a_newer_one_behind_it_uploads_only_its_weights_unless_it_ends_an_epoch():
    policy = UploadPolicy(10, 300, Clock())
    assert plan(policy.choose(saves(5, 10), stopping=False)) == ([(5, WEIGHTS)], [])
    assert plan(policy.choose(saves(5, 10, epoch_end=(5,)), stopping=False)) == ([(5, FULL)], [])


def test_training_state_uploads_after_at_most_every_saves_skipping_those_before_it_but_epoch_saves():
    policy = UploadPolicy(3, 300, Clock())
    policy.uploaded(saves(1)[0], WEIGHTS)
    policy.uploaded(saves(2)[0], WEIGHTS)
    decision = policy.choose(saves(3, 4, 5, 6, epoch_end=(4,)), stopping=False)
    assert plan(decision) == ([(4, FULL), (6, FULL)], [3, 5])


def test_training_state_uploads_once_the_minutes_since_the_last_one_have_passed():
    clock = Clock()
    policy = UploadPolicy(10, 300, clock)
    assert plan(policy.choose(saves(1, 2, 3), stopping=False)) == ([(1, WEIGHTS)], [])
    clock.now = 301
    assert plan(policy.choose(saves(2, 3), stopping=False)) == ([(3, FULL)], [2])
    policy.uploaded(saves(3)[0], FULL)
    assert plan(policy.choose(saves(4, 5), stopping=False)) == ([(4, WEIGHTS)], [])  # the clock restarted


def test_a_stopping_run_skips_the_saves_between_the_upload_in_progress_and_the_newest():
    policy = UploadPolicy(10, 300, Clock())
    decision = policy.choose(saves(2, 3, 4, 5, epoch_end=(3,)), stopping=True)
    assert plan(decision) == ([(3, FULL), (5, FULL)], [2, 4])


def test_a_run_that_saves_faster_than_it_uploads_never_goes_more_than_every_saves_without_training_state():
    """Saves arrive every tick; a full upload takes 3 ticks and a weights upload 1: the queue stays bounded, a
    resumable save lands at least every 4 saves, and the last save uploads in full."""
    clock, every = Clock(), 4
    policy = UploadPolicy(every, 10_000, clock)
    queued: list[Save] = []
    full_steps, skipped, busy_until, step = [], 0, 0, 0
    while step < 40 or queued:
        if step < 40:
            step += 1
            queued += saves(step)
        clock.now += 1
        if clock.now < busy_until or not queued:
            continue
        decision = policy.choose(queued, stopping=step == 40)
        for save in decision.skipped:
            queued.remove(save)
        skipped += len(decision.skipped)
        policy.skipped(len(decision.skipped))
        for save, mode in decision.uploads:
            queued.remove(save)
            busy_until = clock.now + (3 if mode == FULL else 1)
            policy.uploaded(save, mode)
            if mode == FULL:
                full_steps.append(save.step)
        assert len(queued) <= every + 3
    assert full_steps[-1] == 40 and skipped > 0
    gaps = [b - a for a, b in zip([0, *full_steps], full_steps, strict=False)]
    assert max(gaps) <= every + 3, full_steps  # saves that arrived while the resumable one uploaded
