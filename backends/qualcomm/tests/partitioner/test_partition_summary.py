"""The partition summary: delegated / CPU node counts in one log line per method, visible
without logging configuration, long lists truncated."""

from __future__ import annotations

import torch

from backends.qualcomm.tests.helpers import models_float as m
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of

# ---- partition summary -------------------------------------------------------------------------
SKIP_CUMSUM = {"aten.cumsum.default"}  # cumsum has a builder: kept on the CPU to split graphs


class PartlyDelegated(torch.nn.Module):
    """5 delegable nodes, 2 cumsum and 1 sigmoid skipped by the test (skip_node_op_set)."""

    def forward(self, x):
        y = torch.cumsum(torch.relu(x), dim=1)
        z = torch.cumsum(torch.sigmoid(y) * 2.0, dim=0)
        return torch.tanh(z) + x


class TestPartitionSummary:
    def test_counts_and_log_line(self, caplog):
        import logging

        caplog.set_level(logging.INFO, logger="backends.qualcomm")
        tester = QnnTester(PartlyDelegated(), inputs_of((3, 4))).lower(
            skip_node_op_set=SKIP_CUMSUM | {"aten.sigmoid.default"}
        )
        summary = tester.partitioner.summary
        assert (summary.delegated_nodes, summary.delegates, summary.cpu_nodes) == (4, 3, 3)
        assert [(g.op, g.reason, g.count) for g in summary.cpu_ops] == [
            ("aten.cumsum.default", "skipped by skip_node_op_set (aten.cumsum.default)", 2),
            ("aten.sigmoid.default", "skipped by skip_node_op_set (aten.sigmoid.default)", 1),
        ]
        records = [
            r
            for r in caplog.records
            if r.name == "backends.qualcomm.partitioner.qnn_partitioner"
            and r.getMessage().startswith("QnnPartitioner: ")
        ]
        assert len(records) == 1 and records[0].levelname == "WARNING"
        assert records[0].getMessage() == (
            "QnnPartitioner: 4 of 7 nodes delegated in 3 delegate(s); 3 left on the CPU: "
            "aten.cumsum.default x2 (skipped by skip_node_op_set (aten.cumsum.default)); "
            "aten.sigmoid.default x1 (skipped by skip_node_op_set (aten.sigmoid.default))"
        )
        tester.to_executorch().run().compare()

    def test_fully_delegated_logs_info(self, caplog):
        import logging

        caplog.set_level(logging.INFO, logger="backends.qualcomm")
        tester = QnnTester(m.ReluSigmoid(), inputs_of((2, 8))).lower()
        records = [r for r in caplog.records if r.getMessage().startswith("QnnPartitioner: ")]
        assert [(r.levelname, r.getMessage()) for r in records] == [
            ("INFO", "QnnPartitioner: 4 of 4 nodes delegated in 1 delegate(s); nothing left on the CPU")
        ]
        assert tester.partitioner.summary.cpu_op_counts() == {}

    def test_visible_without_logging_configuration(self, tmp_path):
        """A user who configures no logging sees the summary on stderr (WARNING level)."""
        import subprocess
        import sys
        from pathlib import Path

        script = tmp_path / "lower.py"
        script.write_text(
            "import torch\n"
            "from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of\n"
            "from backends.qualcomm.tests.helpers import models_float as m\n"
            "QnnTester(m.WithCumsum(), inputs_of((2, 8))).lower(skip_node_op_set={'aten.cumsum.default'})\n"
        )
        repo = Path(__file__).resolve().parents[4]
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=300,
            env={**__import__("os").environ, "PYTHONPATH": str(repo)},
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert (
            "QnnPartitioner: 3 of 4 nodes delegated in 2 delegate(s); 1 left on the CPU: "
            "aten.cumsum.default x1 (skipped by skip_node_op_set (aten.cumsum.default))" in result.stderr
        )

    def test_long_lists_are_truncated(self):
        from backends.qualcomm.partitioner.summary import MAX_LISTED_GROUPS, CpuOpGroup, PartitionSummary

        groups = [CpuOpGroup(f"aten.op{i}.default", "no QNN builder", 2, ("a", "b")) for i in range(20)]
        text = str(PartitionSummary(100, 3, 40, groups))
        assert text.count(" x2 (") == MAX_LISTED_GROUPS
        assert text.endswith("... 12 more op/reason group(s), 24 node(s)")

    def test_one_call_lowering_logs_per_method(self, caplog):
        import logging

        from backends.qualcomm import to_edge_transform_and_lower_to_qnn
        from backends.qualcomm.tests.helpers.tester import fp16_compile_specs

        caplog.set_level(logging.INFO, logger="backends.qualcomm")
        to_edge_transform_and_lower_to_qnn(
            m.WithCumsum(), inputs_of((2, 8)), fp16_compile_specs(), skip_node_op_set=SKIP_CUMSUM
        )
        messages = [r.getMessage() for r in caplog.records if r.getMessage().startswith("QnnPartitioner: ")]
        assert messages == [
            "QnnPartitioner: 3 of 4 nodes delegated in 2 delegate(s); 1 left on the CPU: "
            "aten.cumsum.default x1 (skipped by skip_node_op_set (aten.cumsum.default))"
        ]
