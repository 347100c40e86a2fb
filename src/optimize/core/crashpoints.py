"""Named crash points for fault tests: `OPTIMIZE_CRASH_AT=site[:n]` kills the process at the n-th hit of site.

Only tests set the variable; in normal use `crashpoint` is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

from optimize.core.environment import setting

_hits: Counter[str] = Counter()


def crashpoint(site: str) -> None:
    spec = setting("OPTIMIZE_CRASH_AT")
    if not spec:
        return
    name, _, count = spec.partition(":")
    if name != site:
        return
    _hits[site] += 1
    if _hits[site] >= int(count or 1):
        os.kill(os.getpid(), signal.SIGKILL)
