"""replay_upstream_cases.py's reading of upstream's test sources: test methods, class setups,
skips, stubbed imports, and the cases one method yields (one per lowering call, labelled by its
sub-test, quantization deferred until a case is replayed)."""

from __future__ import annotations

import pytest

from backends.qualcomm.tests.tools import upstream_cases as uc
from backends.qualcomm.tests.tools.replay_harness import Harness
from backends.qualcomm.tests.tools.replay_upstream_cases import summarize

TESTS = f"""
import torch
from {uc.UPSTREAM_PACKAGE}.tests.utils import TestQNN
from {uc.UPSTREAM_PACKAGE}.utils.utils import generate_htp_compiler_spec


class TestQNNFloatingPointOperator(TestQNN):
    def setUp(self):
        backend_options = generate_htp_compiler_spec(use_fp16=True)
        TestQNN.atol = 1e-1
        TestQNN.rtol = 1e-1

    def test_qnn_backend_two(self):
        for i, module in enumerate([Scale(2.0), Scale(3.0)]):
            with self.subTest(i=i):
                self.lower_module_and_test_output(module, (torch.randn(2, 3),))

    def test_qnn_backend_nested_inputs(self):
        self.lower_module_and_test_output(AddPair(), (torch.randn(2, 3), (torch.randn(2, 3), torch.randn(2, 3))))

    @unittest.skipIf(is_qnn_sdk_version_greater_than("2.37"), "fails after 2.37")
    def test_qnn_backend_skipped(self):
        self.lower_module_and_test_output(Scale(1.0), (torch.randn(2),))

    def test_qnn_backend_upstream_import(self):
        from {uc.UPSTREAM_PACKAGE}._passes import SomethingUpstream

        SomethingUpstream()

    def test_qnn_backend_inplace(self):
        self.lower_module_and_test_output(InPlace(), (torch.randn(2, 5),))


class TestQNNQuantizedOperator(TestQNN):
    def setUp(self):
        backend_options = generate_htp_compiler_spec(use_fp16=False)
        TestQNN.atol = 1e-1
        TestQNN.rtol = 1

    def test_qnn_backend_scale(self):
        module = self.get_qdq_module(Scale(0.5), (torch.randn(4),))
        self.lower_module_and_test_output(module, (torch.randn(4),))
        module = self.get_qdq_module(Unquantizable(), (torch.randn(4),))
        self.lower_module_and_test_output(module, (torch.randn(4),))


class TestQNNFloatingPointUtils(TestQNN):
    def test_qnn_backend_not_replayed(self):
        pass
"""

MODELS = f"""
import torch
from {uc.UPSTREAM_PACKAGE}.builders.custom_ops import _hadamard_matrix


class Scale(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class AddPair(torch.nn.Module):
    def forward(self, x, pair):
        return x + pair[0] * pair[1]


class InPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.leaky_relu = torch.nn.LeakyReLU(0.05, inplace=True)

    def forward(self, x):
        return self.leaky_relu(x)


class Unquantizable(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("quantizing this module fails")


HADAMARD = _hadamard_matrix(4, None, torch.float32)
"""


@pytest.fixture(scope="module")
def harness() -> Harness:
    return Harness("host", TESTS, MODELS)


def test_methods_setups_and_skips():
    methods = uc.test_methods(TESTS)
    assert [(m.cls, m.name) for m in methods] == [
        ("TestQNNFloatingPointOperator", "test_qnn_backend_two"),
        ("TestQNNFloatingPointOperator", "test_qnn_backend_nested_inputs"),
        ("TestQNNFloatingPointOperator", "test_qnn_backend_skipped"),
        ("TestQNNFloatingPointOperator", "test_qnn_backend_upstream_import"),
        ("TestQNNFloatingPointOperator", "test_qnn_backend_inplace"),
        ("TestQNNQuantizedOperator", "test_qnn_backend_scale"),
    ]
    setups = uc.class_setups(TESTS)
    assert setups["TestQNNFloatingPointOperator"] == uc.ClassSetup(True, 0.1, 0.1)
    assert setups["TestQNNQuantizedOperator"] == uc.ClassSetup(False, 0.1, 1.0)
    assert [uc.decorator_skip(m) for m in methods] == [
        None,
        None,
        "upstream skips it on QNN 2.51: fails after 2.37",
        None,
        None,
        None,
    ]


def test_models_load_with_stubbed_upstream_imports(harness):
    h = harness.namespace["HADAMARD"]
    assert h.tolist() == [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
    assert harness.namespace["Scale"](2.0)(harness.namespace["torch"].ones(2)).tolist() == [2.0, 2.0]


def test_cases_are_lowering_calls_labelled_by_subtest(harness):
    assert harness.enumerate("TestQNNFloatingPointOperator", "test_qnn_backend_two") == {"cases": ["i=0", "i=1"]}
    # quantization is deferred: the failing one is not run by enumeration
    assert harness.enumerate("TestQNNQuantizedOperator", "test_qnn_backend_scale") == {"cases": ["", ""]}


def test_an_upstream_only_name_skips_the_case(harness):
    answer = harness.enumerate("TestQNNFloatingPointOperator", "test_qnn_backend_upstream_import")
    assert answer["error"]["status"] == "skip" and answer["error"]["reason"] == "harness"
    assert "SomethingUpstream" in answer["error"]["message"]


def test_replayed_cases_pass_or_say_why(harness):
    for index in (0, 1):
        result = harness.replay("TestQNNFloatingPointOperator", "test_qnn_backend_two", index)
        assert result["status"] == "pass", result
    assert harness.replay("TestQNNQuantizedOperator", "test_qnn_backend_scale", 0)["status"] == "pass"
    # a tuple among the inputs (index_put's indices): the program takes them flattened
    assert harness.replay("TestQNNFloatingPointOperator", "test_qnn_backend_nested_inputs", 0)["status"] == "pass"
    # an in-place module: ExecuTorch returns the mutated input first (checked against eager's
    # input, which the reference call mutates on a copy), then the one user output
    assert harness.replay("TestQNNFloatingPointOperator", "test_qnn_backend_inplace", 0)["status"] == "pass"
    failed = harness.replay("TestQNNQuantizedOperator", "test_qnn_backend_scale", 1)
    assert failed["status"] == "error" and failed["reason"] == "quantize" and failed["message"]


def test_summary_pass_rate_leaves_upstream_skips_out():
    rows = [
        {"class": "A", "test": "t", "index": 0, "status": "pass"},
        {"class": "A", "test": "t", "index": 1, "status": "fail", "reason": "numerics", "message": "x"},
        {"class": "A", "test": "u", "index": 0, "status": "skip", "reason": "upstream-skip", "message": "y"},
        {"class": "B", "test": "v", "index": 0, "status": "pass"},
    ]
    summary = summarize(rows)
    assert summary["by_class"]["A"]["pass_rate"] == 0.5
    assert summary["by_class"]["all"] == {"pass": 2, "fail": 1, "skip": 1, "cases": 4, "pass_rate": round(2 / 3, 4)}
    assert summary["by_reason"] == {"fail/numerics": 1, "skip/upstream-skip": 1}


def test_upstream_sources_of_the_wheel_are_read():
    source = (uc.upstream_tests_dir() / "test_qnn_delegate.py").read_text()
    methods = uc.test_methods(source)
    assert {m.cls for m in methods} == set(uc.CLASSES)
    assert len(methods) == 435  # executorch 1.5.1
    assert uc.class_setups(source)["TestQNNQuantizedModel"] == uc.ClassSetup(False, 0.1, 1.0)
