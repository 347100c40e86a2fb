"""Where an update's time goes: `OPTIMIZE_PROFILE_UPDATES=N` in a worker's environment profiles N updates with
`torch.profiler` after `WARMUP` updates (the first ones allocate and compile) and prints the operators that took
the most time, by self device time on a GPU (self cpu time otherwise), to the worker's log (`akka training runs
logs RUN`). Off by default: profiling slows the updates it measures."""

from __future__ import annotations

from optimize.core.environment import setting

WARMUP = 2
ROWS = 30


def profiled_updates() -> int:
    try:
        return setting("OPTIMIZE_PROFILE_UPDATES")
    except ValueError:  # a worker profiles nothing rather than fail its run over it
        return 0


def update_profiler(updates: int, cuda: bool):
    """A TrainerCallback that profiles `updates` updates after the warm-up ones."""
    import torch
    from transformers import TrainerCallback

    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"

    class UpdateProfiler(TrainerCallback):
        def __init__(self) -> None:
            self.profile, self.seen, self.done = None, 0, False

        def on_step_begin(self, args, state, control, **kwargs):
            self.seen += 1
            if self.profile is None and not self.done and self.seen > WARMUP:
                self.profile = torch.profiler.profile(activities=activities, record_shapes=False)
                self.profile.__enter__()
                self.first = state.global_step

        def on_step_end(self, args, state, control, **kwargs):
            if self.profile is not None and state.global_step - self.first >= updates:
                self._report(state.global_step - self.first)

        def on_train_end(self, args, state, control, **kwargs):
            if self.profile is not None:
                self._report(state.global_step - self.first)

        def _report(self, measured: int) -> None:
            if cuda:
                torch.cuda.synchronize()
            self.profile.__exit__(None, None, None)
            table = self.profile.key_averages().table(sort_by=sort, row_limit=ROWS)
            print(f"profile of {measured} update(s) after {WARMUP} warm-up update(s), by {sort}:\n{table}",
                  flush=True)
            self.profile, self.done = None, True

    return UpdateProfiler()
