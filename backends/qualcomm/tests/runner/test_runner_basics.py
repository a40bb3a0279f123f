"""qnn_executor_runner on a small fully delegated model: its outputs equal executorch.runtime's;
a missing model file or input list and a wrongly sized input are clean failures."""

from __future__ import annotations

import torch

from backends.qualcomm.tests.helpers.real_models import assert_clean_failure
from backends.qualcomm.utils import pte_tools


class TestQNNRunner:
    def test_runner_outputs_equal_runtime(self, small_model):
        input_list = pte_tools.write_input_files(small_model.samples, small_model.folder / "inputs")
        out_dir = small_model.folder / "outputs"
        perf = small_model.folder / "perf.txt"
        result = pte_tools.run_runner(
            small_model.pte_path, input_list, out_dir, iterations=3, warm_up=1, perf_path=perf
        )
        assert result.returncode == 0, result.stderr
        for idx, expected in enumerate(small_model.runtime_outputs):
            got = pte_tools.read_raw_output(out_dir, idx, 0, expected)
            assert torch.equal(got, expected), f"sample {idx}: runner != runtime"
        assert result.avg_latency_ms is not None and result.avg_latency_ms > 0

    def test_missing_model_file(self, small_model):
        input_list = pte_tools.write_input_files(small_model.samples[:1], small_model.folder / "in_missing")
        missing = small_model.folder / "does_not_exist.pte"
        result = pte_tools.run_runner(missing, input_list, small_model.folder / "out_missing")
        assert_clean_failure(result, missing.name)

    def test_missing_input_list(self, small_model):
        missing = small_model.folder / "no_input_list.txt"
        result = pte_tools.run_runner(small_model.pte_path, missing, small_model.folder / "out_nolist")
        assert_clean_failure(result, missing.name)

    def test_wrong_input_size(self, small_model):
        folder = small_model.folder / "in_wrong_size"
        input_list = pte_tools.write_input_files([[torch.randn(1, 3, 8, 8)]], folder)
        result = pte_tools.run_runner(small_model.pte_path, input_list, small_model.folder / "out_wrong")
        assert_clean_failure(result, "input_0_0.raw", "size", "bytes")
