"""The benches' load discipline (bench/quiet.py, bench/timing.py) on fake load figures: how much
CPU other processes used is computed from tick counts, a loaded run's ratios are refused (or
marked with --allow_loaded), a loaded attempt is timed again, and variants alternate within
rounds. No wall-clock assertions: ticks, clock and sleep are fed by the test."""

from __future__ import annotations

import argparse

import pytest

from bench import quiet
from bench.quiet import LoadMonitor, LoadReport, load_report, ratio_text, refuse_if_loaded
from bench.timing import Variant, time_alternating

HZ = 100.0  # fake clock ticks per second


class FakeTicks:
    """Busy / own tick counters and a clock that advance by given steps per reading."""

    def __init__(self, busy_steps: list[int], own_steps: list[int], seconds: list[float]) -> None:
        self.busy_steps, self.own_steps, self.seconds = list(busy_steps), list(own_steps), list(seconds)
        self.busy = self.own = 0
        self.now = 0.0

    def read_busy(self) -> int:
        self.busy += self.busy_steps.pop(0)
        return self.busy

    def read_own(self) -> int:
        self.own += self.own_steps.pop(0)
        return self.own

    def clock(self) -> float:
        self.now += self.seconds.pop(0)
        return self.now

    def monitor(self, max_other_cores: float) -> LoadMonitor:
        return LoadMonitor(max_other_cores, self.read_busy, self.read_own, self.clock, ticks_per_second=HZ)


def report(other_cores: float, limit: float = quiet.DEFAULT_MAX_OTHER_CORES) -> LoadReport:
    return LoadReport(seconds=10.0, own_cores=2.0, other_cores=other_cores, max_other_cores=limit)


def test_other_cores_are_busy_ticks_minus_own_ticks():
    # 10 s at 100 ticks/s: all cores busy 2100 ticks, this process 2000 -> others 0.1 cores
    r = load_report(busy_ticks=2100, own_ticks=2000, seconds=10.0, ticks_per_second=HZ, max_other_cores=0.2)
    assert r.own_cores == pytest.approx(2.0)
    assert r.other_cores == pytest.approx(0.1)
    assert r.resolution_cores == pytest.approx(0.001)  # one tick over 10 s
    assert r.quiet


def test_other_cores_never_negative():
    # tick counters read at slightly different moments: own may exceed busy
    r = load_report(busy_ticks=1990, own_ticks=2000, seconds=10.0, ticks_per_second=HZ, max_other_cores=0.2)
    assert r.other_cores == 0.0 and r.quiet


@pytest.mark.parametrize(
    "other_ticks, quiet_expected",
    [(0, True), (150, True), (200, True), (201, False), (1000, False)],
)
def test_limit_is_inclusive(other_ticks, quiet_expected):
    # 10 s at 100 ticks/s: 200 other ticks = 0.2 cores, the default limit
    r = load_report(2000 + other_ticks, 2000, 10.0, HZ, quiet.DEFAULT_MAX_OTHER_CORES)
    assert r.quiet is quiet_expected


def test_monitor_reads_the_interval_of_the_with_block():
    # enter: busy 500, own 400, t = 1; exit: busy +1300, own +1000, t + 5 s -> others 300 ticks / 5 s
    ticks = FakeTicks(busy_steps=[500, 1300], own_steps=[400, 1000], seconds=[1.0, 5.0])
    with ticks.monitor(0.2) as monitor:
        pass
    assert monitor.report is not None
    assert monitor.report.seconds == pytest.approx(5.0)
    assert monitor.report.own_cores == pytest.approx(2.0)
    assert monitor.report.other_cores == pytest.approx(0.6)
    assert not monitor.report.quiet


def test_quiet_run_prints_ratios(capsys):
    assert refuse_if_loaded(report(0.05))
    out = capsys.readouterr().out
    assert "quiet" in out and "refusing" not in out
    assert ratio_text(0.931, allowed=True, loaded=False) == "0.93x"


def test_loaded_run_refuses_ratios(capsys):
    assert not refuse_if_loaded(report(0.8))
    out = capsys.readouterr().out
    assert "LOADED" in out and "refusing to print ratios" in out
    assert ratio_text(0.93, allowed=False, loaded=True) == "refused (loaded)"


def test_allow_loaded_marks_the_ratios(capsys):
    assert refuse_if_loaded(report(0.8), allow_loaded=True)
    assert "NOT evidence" in capsys.readouterr().out
    assert ratio_text(0.93, allowed=True, loaded=True) == "0.93x (LOADED)"


def test_custom_limit():
    assert not report(0.3).quiet
    assert report(0.3, limit=0.5).quiet


def test_load_arguments():
    parser = argparse.ArgumentParser()
    quiet.add_load_arguments(parser)
    args = parser.parse_args([])
    assert args.max_other_cores == quiet.DEFAULT_MAX_OTHER_CORES and not args.allow_loaded and args.attempts == 1
    args = parser.parse_args(["--max_other_cores", "0.5", "--allow_loaded", "--attempts", "3"])
    assert args.max_other_cores == 0.5 and args.allow_loaded and args.attempts == 3
    no_attempts = argparse.ArgumentParser()
    quiet.add_load_arguments(no_attempts, attempts=False)
    assert not hasattr(no_attempts.parse_args([]), "attempts")


def recording_variants(calls: list[str]) -> list[Variant]:
    return [
        Variant("a", lambda: calls.append("a")),
        Variant("b", lambda: calls.append("b"), prepare=lambda: calls.append("prep b")),
    ]


def test_variants_alternate_within_rounds():
    calls: list[str] = []
    ticks = FakeTicks(busy_steps=[0, 100], own_steps=[0, 100], seconds=[0.0, 1.0])
    timed = time_alternating(recording_variants(calls), runs=3, warm_up=1, monitor_factory=ticks.monitor)
    # one warm-up round, then three timed rounds, a before b in each, b's prepare before b
    assert calls == ["a", "prep b", "b"] * 4
    assert [len(t) for t in timed.times_ms.values()] == [3, 3]
    assert timed.attempts == 1 and timed.load.quiet
    assert set(timed.medians_ms) == {"a", "b"}


def test_loaded_attempt_is_timed_again_after_a_pause():
    calls: list[str] = []
    pauses: list[float] = []
    # attempt 1: others 1.0 core over 1 s (loaded); attempt 2: others 0.0 (quiet)
    ticks = FakeTicks(busy_steps=[0, 300, 0, 200], own_steps=[0, 200, 0, 200], seconds=[0.0, 1.0, 0.0, 1.0])
    timed = time_alternating(
        recording_variants(calls),
        runs=2,
        warm_up=0,
        attempts=3,
        pause_s=7.0,
        monitor_factory=ticks.monitor,
        sleep=pauses.append,
    )
    assert timed.attempts == 2 and timed.load.quiet
    assert pauses == [7.0]
    assert [len(t) for t in timed.times_ms.values()] == [2, 2]  # the quiet attempt's rounds only


def test_gives_up_after_the_last_attempt_and_reports_the_load():
    ticks = FakeTicks(busy_steps=[0, 300, 0, 300], own_steps=[0, 100, 0, 100], seconds=[0.0, 1.0, 0.0, 1.0])
    timed = time_alternating(
        recording_variants([]), runs=1, warm_up=0, attempts=2, monitor_factory=ticks.monitor, sleep=lambda s: None
    )
    assert timed.attempts == 2
    assert not timed.load.quiet and timed.load.other_cores == pytest.approx(2.0)
