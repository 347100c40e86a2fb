"""`OPTIMIZE_PROFILE_UPDATES=N` profiles N updates after the warm-up ones and prints where their time went to the
worker's log (`training.engines.profiling`)."""

from __future__ import annotations

from types import SimpleNamespace

from optimize.training.engines.profiling import WARMUP, profiled_updates, update_profiler


def test_the_setting_is_read_and_a_bad_value_profiles_nothing(monkeypatch):
    monkeypatch.delenv("OPTIMIZE_PROFILE_UPDATES", raising=False)
    assert profiled_updates() == 0
    monkeypatch.setenv("OPTIMIZE_PROFILE_UPDATES", "3")
    assert profiled_updates() == 3
    monkeypatch.setenv("OPTIMIZE_PROFILE_UPDATES", "three")
    assert profiled_updates() == 0


def test_the_updates_after_the_warm_up_are_profiled_and_their_operators_printed(capsys):
    import torch

    profiler = update_profiler(2, cuda=False)
    state = SimpleNamespace(global_step=0)
    weights = torch.randn(64, 64, requires_grad=True)
    for step in range(WARMUP + 4):
        profiler.on_step_begin(None, state, None)
        (weights @ weights).sum().backward()
        state.global_step = step + 1
        profiler.on_step_end(None, state, None)
    profiler.on_train_end(None, state, None)
    out = capsys.readouterr().out
    assert out.count("profile of 2 update(s) after 2 warm-up update(s), by self_cpu_time_total") == 1, out
    assert "aten::mm" in out  # the matmul of each profiled update
