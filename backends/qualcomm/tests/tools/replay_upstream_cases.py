"""Replay ExecuTorch's own Qualcomm operator and model test cases through OUR public API.

Upstream's classes TestQNNFloatingPointOperator, TestQNNQuantizedOperator,
TestQNNFloatingPointModel and TestQNNQuantizedModel (the executorch wheel's
backends/qualcomm/tests/test_qnn_delegate.py, modules from its models.py) are read as source
(`upstream_cases.py`: nothing of upstream's backend is imported). Each test method runs with a
stand-in `self`: every `self.lower_module_and_test_output(module, inputs, ...)` call is one case.
A case is lowered with our `to_edge_transform_and_lower_to_qnn` (fp16 or quantized HTP as the
class's setUp says, SM8650), `self.get_qdq_module(...)` quantizes with our `QnnQuantizer`, the
program runs on the host engine (or `--engine qnn`), and its outputs are compared as upstream
does: `torch.allclose` against the module itself (eager, or the QDQ module) with the class's
atol / rtol, bool outputs exactly, and the number of QnnDelegate delegates must equal
`expected_partitions`.

Each case runs in a worker process with a timeout: a crash or a hang costs that case, and a new
worker takes the next one. Results are JSON lines (class, test, case index, sub-test, status
pass / fail / error / skip, reason category, message); a finished case is not run again when
the same output file is reused, so slices add up.

    python -m backends.qualcomm.tests.tools.replay_upstream_cases --out replay.jsonl --slice 0/8
    python -m backends.qualcomm.tests.tools.replay_upstream_cases --out replay.jsonl --summary
    python -m backends.qualcomm.tests.tools.replay_upstream_cases --out q.jsonl --engine qnn -k abs
(run slices under `flock /work/heavy.lock`; the summary is by class and by reason)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from backends.qualcomm.tests.tools import upstream_cases as uc

PROTOCOL_PREFIX = "@@replay "


# ---- worker side --------------------------------------------------------------------------------
def _worker_main(engine: str) -> None:
    """Reads requests (JSON lines) on stdin, answers one prefixed JSON line each on stdout; what
    the replayed code prints goes to stderr."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    os.environ["QNN_DELEGATE_CONTEXT_BINARY"] = "1" if engine == "qnn" else "0"
    from backends.qualcomm.tests.tools.replay_harness import Harness

    harness = Harness(engine)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "enumerate":
            answer = harness.enumerate(request["cls"], request["test"])
        else:
            answer = harness.replay(request["cls"], request["test"], request["index"])
        protocol.write(PROTOCOL_PREFIX + json.dumps(answer) + "\n")


class Worker:
    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backends.qualcomm.tests.tools.replay_upstream_cases",
                "--worker",
                "--engine",
                engine,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def ask(self, request: Dict, timeout_s: float) -> Optional[Dict]:
        """The worker's answer, or None when it died or hung (it is then killed)."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return None
        while True:
            ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
            line = self.process.stdout.readline() if ready else ""
            if not line:
                self.kill()
                return None
            if line.startswith(PROTOCOL_PREFIX):
                return json.loads(line[len(PROTOCOL_PREFIX) :])

    def outcome(self) -> str:
        code = self.process.poll()
        if code is None:
            return "hang"
        return f"killed by signal {-code}" if code < 0 else f"exit {code}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=60)


# ---- driver ---------------------------------------------------------------------------------------
def _done_keys(out: Path) -> Dict[tuple, Dict]:
    done = {}
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done[(r["class"], r["test"], r["index"])] = r
    return done


def select_methods(methods: List[uc.TestMethod], pattern: Optional[str], part: Optional[str]) -> List[uc.TestMethod]:
    if pattern:
        methods = [m for m in methods if re.search(pattern, f"{m.cls}.{m.name}")]
    if part:
        i, n = (int(x) for x in part.split("/"))
        methods = methods[i::n]
    return methods


_OUT_LOCK = threading.Lock()


def _record(out, result: Dict) -> None:
    with _OUT_LOCK:
        out.write(json.dumps(result) + "\n")
        out.flush()
        print(
            f"{result['status']:5} {result['class']}.{result['test']}[{result['index']}] {result.get('reason', '')}",
            flush=True,
        )


def _run_methods(methods: List[uc.TestMethod], out, done: Dict, engine: str, timeout_s: float) -> None:
    worker: Optional[Worker] = None
    for method in methods:
        base = {"class": method.cls, "test": method.name}
        skip = uc.decorator_skip(method)
        if skip:
            if (method.cls, method.name, 0) not in done:
                _record(
                    out,
                    {**base, "index": 0, "subtest": "", "status": "skip", "reason": "upstream-skip", "message": skip},
                )
            continue
        worker = worker or Worker(engine)
        cases = worker.ask({"op": "enumerate", "cls": method.cls, "test": method.name}, timeout_s)
        if cases is None:
            _record(
                out,
                {
                    **base,
                    "index": 0,
                    "subtest": "",
                    "status": "error",
                    "reason": "enumerate-crash",
                    "message": worker.outcome(),
                },
            )
            worker = None
            continue
        if "error" in cases:  # the body failed outside any case: one error case
            if (method.cls, method.name, 0) not in done:
                _record(out, {**base, "index": 0, "subtest": "", **cases["error"]})
            continue
        for index, subtest in enumerate(cases["cases"]):
            if (method.cls, method.name, index) in done:
                continue
            worker = worker or Worker(engine)
            answer = worker.ask({"op": "replay", "cls": method.cls, "test": method.name, "index": index}, timeout_s)
            if answer is None:
                reason = "timeout" if worker.outcome() == "hang" else "crash"
                answer = {
                    "status": "error",
                    "reason": reason,
                    "message": f"worker {worker.outcome()} (timeout {timeout_s:g} s)",
                }
                worker = None
            _record(out, {**base, "index": index, "subtest": subtest, "engine": engine, **answer})
    if worker is not None:
        worker.close()


def run(methods: List[uc.TestMethod], out_path: Path, engine: str, timeout_s: float, workers: int = 1) -> None:
    """The cases of `methods`, over `workers` worker processes (methods dealt round-robin)."""
    done = _done_keys(out_path)
    with out_path.open("a") as out:
        threads = [
            threading.Thread(target=_run_methods, args=(methods[i::workers], out, done, engine, timeout_s))
            for i in range(workers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def summarize(results: Iterable[Dict]) -> Dict:
    """Counts by class (pass rate over the cases upstream runs on QNN 2.51, i.e. not skipped by
    its own decorators) and by status / reason."""
    by_class: Dict[str, Counter] = defaultdict(Counter)
    by_reason: Counter = Counter()
    examples: Dict[str, List[str]] = defaultdict(list)
    for r in results:
        by_class[r["class"]][r["status"]] += 1
        by_class["all"][r["status"]] += 1
        if r["status"] != "pass":
            key = f"{r['status']}/{r.get('reason', '')}"
            by_reason[key] += 1
            if len(examples[key]) < 6:
                examples[key].append(f"{r['test']}[{r['index']}]: {r.get('message', '')[:160]}")
    table = {}
    for cls, counts in by_class.items():
        counted = counts["pass"] + counts["fail"] + counts["error"]
        table[cls] = {**counts, "cases": sum(counts.values()), "pass_rate": round(counts["pass"] / max(counted, 1), 4)}
    return {"by_class": table, "by_reason": dict(by_reason.most_common()), "examples": examples}


def print_summary(summary: Dict) -> None:
    print(f"{'class':32} {'cases':>6} {'pass':>5} {'fail':>5} {'error':>5} {'skip':>5} {'pass rate':>9}")
    for cls, c in sorted(summary["by_class"].items(), key=lambda kv: kv[0] == "all"):
        print(
            f"{cls:32} {c['cases']:6} {c.get('pass', 0):5} {c.get('fail', 0):5} {c.get('error', 0):5} "
            f"{c.get('skip', 0):5} {100 * c['pass_rate']:8.1f}%"
        )
    print("\nnot passed, by reason:")
    for key, n in summary["by_reason"].items():
        print(f"{n:5}  {key}")
        for example in summary["examples"][key][:3]:
            print(f"         {example}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("replay_upstream.jsonl"), help="JSON lines, one per case")
    parser.add_argument("--engine", choices=("host", "qnn"), default="host")
    parser.add_argument("-k", dest="pattern", default=None, help="regex on Class.test_name")
    parser.add_argument("--slice", dest="part", default=None, help="i/n: every n-th test method from the i-th")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per case")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (one per core at most)")
    parser.add_argument("--summary", action="store_true", help="print (and write <out>.summary.json) only")
    parser.add_argument("--list", action="store_true", help="list the selected test methods and exit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker_main(args.engine)
        return 0
    if args.summary:
        summary = summarize(_done_keys(args.out).values())
        args.out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print_summary(summary)
        return 0
    source = (uc.upstream_tests_dir() / "test_qnn_delegate.py").read_text()
    methods = select_methods(uc.test_methods(source), args.pattern, args.part)
    if args.list:
        print("\n".join(f"{m.cls}.{m.name}" for m in methods))
        return 0
    run(methods, args.out, args.engine, args.timeout, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
