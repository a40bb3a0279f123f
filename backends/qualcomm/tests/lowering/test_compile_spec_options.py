"""Compile-spec options: the SoC by name or value, HTP options and their type checks, and a
float graph lowered with a quantized spec (a warning, then float32)."""

from __future__ import annotations

import pytest

from backends.qualcomm.tests.helpers import models_float as m
from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs
from backends.qualcomm.tests.helpers.tester import QnnTester, inputs_of


# ---- compile-spec option values ----------------------------------------------------------------
class TestCompileSpecOptions:
    @pytest.mark.parametrize("soc", ["SM8650", "sm8650", " Sm8650", "QcomChipset.SM8650", 57])
    def test_soc_model_by_name_or_value(self, soc):
        from backends.qualcomm import QcomChipset, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec
        from backends.qualcomm.utils.compile_spec import options_from_compile_specs

        specs = generate_qnn_executorch_compiler_spec(soc, generate_htp_compiler_spec(use_fp16=True))
        info = options_from_compile_specs(specs).socInfo
        assert info.socModel == int(QcomChipset.SM8650) == 57
        assert info.htpInfo.vtcmSizeInMb == 8

    @pytest.mark.parametrize("soc", ["SM9999", 0, 58.0, True])
    def test_unknown_soc_model_lists_valid_names(self, soc):
        from backends.qualcomm import generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec

        with pytest.raises(ValueError) as info:
            generate_qnn_executorch_compiler_spec(soc, generate_htp_compiler_spec(use_fp16=True))
        message = str(info.value)
        assert message.startswith(f"soc_model={soc!r} is not a valid QcomChipset; valid values: ")
        assert "SM8650 (57)" in message and "SM8750 (69)" in message and "UNKNOWN_SM" not in message

    def test_performance_mode_by_member_name_or_value(self):
        from backends.qualcomm import QnnExecuTorchHtpPerformanceMode as Mode
        from backends.qualcomm import generate_htp_compiler_spec

        for value in (Mode.kHtpBalanced, "kHtpBalanced", "khtpbalanced", 8):
            assert generate_htp_compiler_spec(True, htp_performance_mode=value).htpOptions.performanceMode == 8

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            (
                dict(htp_performance_mode=99),
                "htp_performance_mode=99 is not a valid QnnExecuTorchHtpPerformanceMode; "
                "valid values: kHtpDefault (0), kHtpSustainedHighPerformance (1), kHtpBurst (2)",
            ),
            (dict(htp_performance_mode=-1), "htp_performance_mode=-1 is not a valid"),
            (dict(htp_performance_mode="turbo"), "htp_performance_mode='turbo' is not a valid"),
            (dict(use_weight_sharing="yes"), "use_weight_sharing='yes' must be a bool (True or False)"),
            (dict(use_multi_contexts=2), "use_multi_contexts=2 must be a bool"),
        ],
    )
    def test_bad_htp_option_values(self, kwargs, message):
        from backends.qualcomm import generate_htp_compiler_spec

        with pytest.raises(ValueError) as info:
            generate_htp_compiler_spec(use_fp16=True, **kwargs)
        assert message in str(info.value)

    def test_bad_use_fp16(self):
        from backends.qualcomm import generate_htp_compiler_spec

        with pytest.raises(ValueError, match=r"use_fp16='False' must be a bool"):
            generate_htp_compiler_spec(use_fp16="False")

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            (
                dict(profile_level=3),
                "profile_level=3 is not a valid QnnExecuTorchProfileLevel; valid values: "
                "kProfileOff (0), kProfileBasic (1), kProfileDetailed (2)",
            ),
            (dict(debug="on"), "debug='on' must be a bool"),
            (dict(dump_intermediate_outputs=5), "dump_intermediate_outputs=5 must be a bool"),
        ],
    )
    def test_bad_compile_spec_values(self, kwargs, message):
        from backends.qualcomm import QcomChipset, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec

        with pytest.raises(ValueError) as info:
            generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, generate_htp_compiler_spec(True), **kwargs)
        assert message in str(info.value)

    def test_backend_options_type_checked(self):
        from backends.qualcomm import QcomChipset, generate_qnn_executorch_compiler_spec

        with pytest.raises(ValueError, match="backend_options must come from generate_htp_compiler_spec"):
            generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, True)


# ---- float graph with quantized precision ------------------------------------------------------
class TestFloatGraphQuantizedPrecision:
    def test_warns_once_and_runs_in_float32(self):
        import warnings

        from backends.qualcomm.partitioner.qnn_partitioner import (
            FLOAT_GRAPH_QUANTIZED_PRECISION_WARNING,
            FloatGraphQuantizedPrecisionWarning,
        )

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            tester = QnnTester(m.ReluSigmoid(), inputs_of((2, 8)), quant_compile_specs()).lower()
        ours = [w for w in caught if issubclass(w.category, FloatGraphQuantizedPrecisionWarning)]
        assert [str(w.message) for w in ours] == [FLOAT_GRAPH_QUANTIZED_PRECISION_WARNING]
        assert "nothing is quantized" in str(ours[0].message) and "QnnQuantizer" in str(ours[0].message)
        assert tester.payload().fp16_precision is False
        tester.to_executorch().run().compare(rtol=1e-5, atol=1e-5)  # float32, not fp16

    def test_no_warning_for_fp16_or_quantized_graphs(self):
        import warnings

        from backends.qualcomm.partitioner.qnn_partitioner import FloatGraphQuantizedPrecisionWarning
        from backends.qualcomm.tests.helpers.quant_tester import QuantTester

        with warnings.catch_warnings():
            warnings.simplefilter("error", FloatGraphQuantizedPrecisionWarning)
            QnnTester(m.ReluSigmoid(), inputs_of((2, 8))).lower()
            QuantTester(m.ReluSigmoid(), inputs_of((2, 8))).lower()
