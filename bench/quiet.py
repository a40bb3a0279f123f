"""Load sampling for benches: how much CPU other processes used while a bench timed.

On a 2-core machine any other load distorts a ratio against XNNPACK by 2x or more (its
spinning thread pool loses far more under oversubscription than our engine does), so a ratio
taken under load is not evidence. Every bench wraps its timed rounds in `LoadMonitor` and
refuses to print ratios when other processes used more than `--max_other_cores` cores.

Other processes' CPU time = busy time of all cores (from /proc/stat) minus this process's
own CPU time (from /proc/self/stat, all its threads), over the same wall-clock interval.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import dataclass
from typing import Callable

# Other processes may use this many cores on average while a bench times (0.2 cores: a shell,
# an editor; a compiler or a test run uses 1-2).
DEFAULT_MAX_OTHER_CORES = 0.2


def _busy_ticks() -> int:
    """Busy clock ticks of all cores since boot (user + nice + system + irq + softirq + steal)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return user + nice + system + irq + softirq + steal


def _own_ticks() -> int:
    """CPU clock ticks of this process (all threads: user + system), children excluded."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of proc(5))


@dataclass
class LoadReport:
    seconds: float
    own_cores: float  # cores this process used on average
    other_cores: float  # cores all other processes used on average
    max_other_cores: float
    resolution_cores: float = 0.0  # one clock tick over the interval: short intervals read coarsely

    @property
    def quiet(self) -> bool:
        return self.other_cores <= self.max_other_cores

    def describe(self) -> str:
        verdict = "quiet" if self.quiet else f"LOADED (limit {self.max_other_cores:.2f})"
        return (
            f"load while timing: other processes {self.other_cores:.2f} cores (resolution "
            f"{self.resolution_cores:.2f}), this bench {self.own_cores:.2f} cores, over {self.seconds:.2f} s on "
            f"{os.cpu_count()} cores: {verdict}"
        )


def load_report(
    busy_ticks: int, own_ticks: int, seconds: float, ticks_per_second: float, max_other_cores: float
) -> LoadReport:
    """The load over an interval from its tick counts: busy = all cores' busy ticks, own = this process's."""
    seconds = max(seconds, 1e-9)
    return LoadReport(
        seconds=seconds,
        own_cores=own_ticks / ticks_per_second / seconds,
        other_cores=max(busy_ticks - own_ticks, 0) / ticks_per_second / seconds,
        max_other_cores=max_other_cores,
        resolution_cores=1.0 / ticks_per_second / seconds,
    )


class LoadMonitor:
    """Context manager measuring the CPU others used during the `with` block.

    The tick sources and the clock are parameters so that tests can feed fake load figures."""

    def __init__(
        self,
        max_other_cores: float = DEFAULT_MAX_OTHER_CORES,
        busy_ticks: Callable[[], int] = _busy_ticks,
        own_ticks: Callable[[], int] = _own_ticks,
        clock: Callable[[], float] = time.perf_counter,
        ticks_per_second: float | None = None,
    ) -> None:
        self.max_other_cores = max_other_cores
        self.report: LoadReport | None = None
        self._busy_ticks, self._own_ticks, self._clock = busy_ticks, own_ticks, clock
        self._hz = ticks_per_second or float(os.sysconf("SC_CLK_TCK"))

    def __enter__(self) -> "LoadMonitor":
        self._t0 = self._clock()
        self._busy0, self._own0 = self._busy_ticks(), self._own_ticks()
        return self

    def __exit__(self, *exc: object) -> None:
        busy, own = self._busy_ticks() - self._busy0, self._own_ticks() - self._own0
        self.report = load_report(busy, own, self._clock() - self._t0, self._hz, self.max_other_cores)


def cpu_description() -> str:
    """The machine a figure was measured on: CPU model, core count and the SIMD flags that matter."""
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("", "unknown CPU", platform.machine()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    wanted = ["avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni"]
    have = [f for f in wanted if f in flags]
    return f"{model}, {os.cpu_count()} cores, flags: {' '.join(have) or 'none of ' + ' '.join(wanted)}"


def refuse_if_loaded(report: LoadReport, allow_loaded: bool = False) -> bool:
    """Prints the load; returns True when the bench's ratios may be printed."""
    print(report.describe())
    if report.quiet:
        return True
    if allow_loaded:
        print("ratios below were taken under load (--allow_loaded): NOT evidence, do not quote them")
        return True
    print("refusing to print ratios: other processes used the cores (rerun on a quiet machine)")
    return False


# Exit status of a bench whose timed rounds were loaded and whose ratios it refused to print.
EXIT_LOADED = 3


def add_load_arguments(parser: argparse.ArgumentParser, attempts: bool = True) -> None:
    """--max_other_cores, --allow_loaded and (when `attempts`) --attempts, shared by every bench."""
    parser.add_argument(
        "--max_other_cores",
        type=float,
        default=DEFAULT_MAX_OTHER_CORES,
        help="refuse ratios when other processes used more cores than this on average while timing",
    )
    parser.add_argument(
        "--allow_loaded", action="store_true", help="print ratios of a loaded run anyway, marked as not evidence"
    )
    if attempts:
        parser.add_argument(
            "--attempts", type=int, default=1, help="time again (after a pause) up to this many times while loaded"
        )


def ratio_text(value: float, allowed: bool, loaded: bool) -> str:
    """A ratio cell: the value when it may be printed (marked when loaded), else a refusal."""
    if not allowed:
        return "refused (loaded)"
    return f"{value:.2f}x" + (" (LOADED)" if loaded else "")
