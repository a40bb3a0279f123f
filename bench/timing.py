"""Alternating timed rounds under load sampling, shared by the benches.

Every variant runs once per round, in the same order each round, so that a load which comes and
goes hits every variant alike; the whole timed part runs inside `quiet.LoadMonitor`, and a loaded
attempt is timed again after a pause (up to `attempts` times) before the bench gives up.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from bench.quiet import DEFAULT_MAX_OTHER_CORES, LoadMonitor, LoadReport


@dataclass
class Variant:
    """One thing to time: `run` is timed; `prepare` (untimed) runs just before each `run`."""

    name: str
    run: Callable[[], object]
    prepare: Callable[[], object] | None = None


@dataclass
class AlternatingTimes:
    times_ms: dict[str, list[float]]
    load: LoadReport
    attempts: int  # attempts made (the last one's times and load are these)
    medians_ms: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self.medians_ms = {name: statistics.median(t) for name, t in self.times_ms.items() if t}


def time_alternating(
    variants: list[Variant],
    runs: int,
    warm_up: int,
    max_other_cores: float = DEFAULT_MAX_OTHER_CORES,
    attempts: int = 1,
    pause_s: float = 30.0,
    monitor_factory: Callable[[float], LoadMonitor] = LoadMonitor,
    sleep: Callable[[float], None] = time.sleep,
) -> AlternatingTimes:
    """Warms every variant up, then times `runs` rounds of one run of each, sampling the load."""
    for _ in range(warm_up):
        for v in variants:
            if v.prepare:
                v.prepare()
            v.run()
    made = 0
    while True:
        made += 1
        times: dict[str, list[float]] = {v.name: [] for v in variants}
        with monitor_factory(max_other_cores) as monitor:
            for _ in range(runs):
                for v in variants:
                    if v.prepare:
                        v.prepare()
                    start = time.perf_counter()
                    v.run()
                    times[v.name].append((time.perf_counter() - start) * 1e3)
        assert monitor.report is not None
        if monitor.report.quiet or made >= attempts:
            return AlternatingTimes(times, monitor.report, made)
        print(f"attempt {made}: {monitor.report.describe()}; timing again in {pause_s:.0f} s")
        sleep(pause_s)
