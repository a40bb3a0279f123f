"""The worker side of replay_upstream_cases.py: upstream's test methods called with a stand-in
`self` whose helpers (lower_module_and_test_output, get_qdq_module, the QAT helpers) use our
public API. One method call either enumerates its cases (every lowering call recorded, none
run, quantization deferred) or replays case k (the calls before k are skipped; the k-th is
quantized, lowered, run and compared, then the method is stopped)."""

from __future__ import annotations

import contextlib
import itertools
import json
import operator
import tempfile
import traceback
import unittest
from typing import Dict, List, Optional, Tuple

import torch

import backends.qualcomm as ours
from backends.qualcomm.tests.tools import upstream_cases as uc

SOC = "SM8650"
Q_AND_DQ = {
    "quantize_per_tensor",
    "dequantize_per_tensor",
    "quantize_per_channel",
    "dequantize_per_channel",
    "quantize_affine",
    "dequantize_affine",
}


class CaseDone(Exception):
    """Raised by the stand-in self once the case being replayed has its result."""

    def __init__(self, result: Dict) -> None:
        super().__init__(result["status"])
        self.result = result


class Lazy:
    """A module made on first use (get_qdq_module's quantization): enumeration and the cases
    before the replayed one never pay for it."""

    def __init__(self, make) -> None:
        self._make, self._module = make, None

    def materialize(self):
        if self._module is None:
            self._module = self._make()
        return self._module

    def __call__(self, *args, **kwargs):
        return self.materialize()(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.materialize(), name)


def make_quantizer(
    quant_dtype=None,
    custom_annotations=(),
    per_channel_conv=True,
    per_channel_linear=False,
    per_channel_embedding=False,
    act_observer=None,
    act_symmetric=False,
    is_qat=False,
    submodule_qconfig_list=None,
    backend=None,
    soc_model=SOC,
    eps=None,
):
    """Upstream's export_utils.make_quantizer, on our QnnQuantizer."""
    quantizer = ours.QnnQuantizer(soc_model=getattr(ours.QcomChipset, str(soc_model)))
    quantizer.add_custom_quant_annotations(custom_annotations)
    quantizer.set_default_quant_config(
        quant_dtype if quant_dtype is not None else ours.QuantDtype.use_8a8w,
        is_qat=is_qat,
        is_conv_per_channel=per_channel_conv,
        is_linear_per_channel=per_channel_linear,
        is_embedding_per_channel=per_channel_embedding,
        act_observer=act_observer,
        act_symmetric=act_symmetric,
        eps=eps,
    )
    quantizer.set_submodule_qconfig_list(submodule_qconfig_list or [])
    return quantizer


class ConvertLinearToConv2d:
    """Key of upstream's pass table; activating it maps to our convert_linear_to_conv2d=True."""


ACTIVATE, KWARGS = "activate", "args_kwargs_defaults"


class _PassManager:
    @staticmethod
    def get_capture_program_passes():
        return {ConvertLinearToConv2d: {ACTIVATE: False, KWARGS: {}}}


def _hadamard_matrix(dim: int, device=None, dtype=None) -> torch.Tensor:
    """The +-1 Hadamard matrix of order `dim` (a power of two) by Sylvester's doubling."""
    h = torch.ones((1, 1), device=device, dtype=dtype)
    while h.shape[0] < dim:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def stubs() -> Dict[str, object]:
    """Upstream names the test sources import, mapped to ours (absent ones become Missing)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    return {
        "_hadamard_matrix": _hadamard_matrix,
        "QuantDtype": ours.QuantDtype,
        "ModuleQConfig": ours.ModuleQConfig,
        "get_submodule_type_predicate": ours.get_submodule_type_predicate,
        "get_submodule_name_predicate": ours.get_submodule_name_predicate,
        "generate_htp_compiler_spec": ours.generate_htp_compiler_spec,
        "generate_qnn_executorch_compiler_spec": ours.generate_qnn_executorch_compiler_spec,
        "to_edge_transform_and_lower_to_qnn": ours.to_edge_transform_and_lower_to_qnn,
        "QnnExecuTorchBackendType": ours.QnnExecuTorchBackendType,
        "get_backend_type": lambda backend: ours.QnnExecuTorchBackendType.kHtpBackend,
        "make_quantizer": make_quantizer,
        "prepare_pt2e": prepare_pt2e,
        "convert_pt2e": convert_pt2e,
        "ConvertLinearToConv2d": ConvertLinearToConv2d,
        "get_qnn_pass_manager_cls": lambda: _PassManager,
        "QCOM_PASS_ACTIVATE_KEY": ACTIVATE,
        "QCOM_PASS_ARGS_KWARGS_DEFAULTS_KEY": KWARGS,
        "QCOM_MODULE": "module",
        "QCOM_SAMPLE_INPUTS": "sample_inputs",
        "QCOM_ANNOTATION": "annotation",
        "QCOM_QUANT_DTYPE": "quant_dtype",
        "Q_ANNOTATION_KEY": "quantization_annotation",
        "is_qnn_sdk_version_less_than": lambda v: uc.QNN_VERSION < uc._version_tuple(v),
        "is_qnn_sdk_version_greater_than": lambda v: uc.QNN_VERSION > uc._version_tuple(v),
    }


def _flatten(output) -> List[torch.Tensor]:
    if isinstance(output, dict):
        return [output["out"].detach()]
    if isinstance(output, (list, tuple)):
        return [o.detach() for o in output]
    return [output.detach()]


def compare(got: List[torch.Tensor], ref: List[torch.Tensor], atol: float, rtol: float) -> Optional[str]:
    """Upstream's _assert_outputs_equal: None when equal, else what differs."""
    if len(got) != len(ref):
        return f"{len(got)} outputs, reference has {len(ref)}"
    for i, (g, r) in enumerate(zip(got, ref)):
        if g.numel() != r.numel():
            return f"output {i}: shape {tuple(g.shape)}, reference {tuple(r.shape)}"
        g = g.reshape(r.shape)
        if g.dtype == torch.bool or r.dtype == torch.bool:
            bad = int(torch.count_nonzero(g.to(torch.bool) ^ r.to(torch.bool)))
            if bad:
                return f"output {i}: {bad} / {r.numel()} bools differ"
            continue
        g = g.to(r.dtype)
        if not torch.allclose(g, r, atol=atol, rtol=rtol, equal_nan=False):
            diff = (g.double() - r.double()).abs()
            bad = int((~torch.isclose(g, r, atol=atol, rtol=rtol)).sum())
            return f"output {i}: {bad} / {r.numel()} elements off, max abs diff {float(diff.nan_to_num(float('inf')).max()):.4g} (atol {atol:g}, rtol {rtol:g})"
    return None


def _qdq_nodes(graph_module) -> bool:
    return any(
        n.op == "call_function" and getattr(n.target, "__name__", "").split(".")[0] in Q_AND_DQ
        for n in graph_module.graph.nodes
    )


def cpu_ops(edge) -> List[str]:
    """The ops of the lowered program left on ExecuTorch's CPU kernels (QDQ and getitem aside)."""
    names = []
    for node in edge.exported_program().graph.nodes:
        if node.op != "call_function" or "executorch_call_delegate" in str(node.target):
            continue
        name = str(node.target)
        if name == "<built-in function getitem>" or any(q in name for q in Q_AND_DQ):
            continue
        names.append(name.replace("aten.", "").replace("dim_order_ops.", ""))
    return names


class ReplaySelf(unittest.TestCase):
    """Upstream's `self` (TestQNN) for one method call; `target` None enumerates."""

    atol = 0.0
    rtol = 0.0
    backend = "htp"
    soc_model = SOC
    enable_x86_64 = False
    compile_only = False
    online_prepare = False
    shared_buffer = False
    profile_level = 0

    def __init__(self, setup: uc.ClassSetup, engine: str, target: Optional[int]) -> None:
        super().__init__("run")
        type(self).atol, type(self).rtol = setup.atol, setup.rtol
        self.setup, self.engine, self.target = setup, engine, target
        self.cases: List[str] = []
        self.labels: List[str] = []
        self.chipset_table = {SOC: getattr(ours.QcomChipset, SOC)}
        self.compiler_specs = ours.generate_qnn_executorch_compiler_spec(
            soc_model=ours.QcomChipset.SM8650, backend_options=ours.generate_htp_compiler_spec(use_fp16=setup.use_fp16)
        )

    @contextlib.contextmanager
    def subTest(self, msg=None, **params):
        self.labels.append(", ".join([str(msg)] * (msg is not None) + [f"{k}={v}" for k, v in params.items()]))
        try:
            yield
        except (CaseDone, unittest.SkipTest, uc.Unsupported):
            raise
        except Exception:
            if self.target is None or len(self.cases) > self.target:
                raise
            # upstream's subTest records a failure and goes on; a failure before the replayed
            # case would not stop it either
        finally:
            self.labels.pop()

    # -- quantization ------------------------------------------------------------------------
    def get_qdq_module(
        self,
        module,
        inputs,
        is_conv_per_channel=True,
        is_linear_per_channel=False,
        is_embedding_per_channel=False,
        custom_quant_annotations=(),
        quant_dtype=None,
        dynamic_shapes=None,
        bypass_check=False,
        block_size_map=None,
        submodule_qconfig_list=None,
    ):
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        def make():
            # upstream's test_qnn_backend_expand quantizes its own quantized module again
            source = module.materialize() if isinstance(module, Lazy) else module
            m = torch.export.export(source, inputs, dynamic_shapes=dynamic_shapes, strict=True).module()
            quantizer = make_quantizer(
                quant_dtype,
                custom_quant_annotations,
                is_conv_per_channel,
                is_linear_per_channel,
                is_embedding_per_channel,
                submodule_qconfig_list=submodule_qconfig_list,
            )
            if block_size_map is not None:
                quantizer.set_block_size_map(block_size_map)
            prepared = prepare_pt2e(m, quantizer)
            prepared(*inputs)
            converted = convert_pt2e(prepared)
            if not bypass_check and not _qdq_nodes(converted):
                raise AssertionError("get_qdq_module: the quantized module has no quantize / dequantize node")
            return converted

        return Lazy(make)

    def get_prepared_qat_module(
        self,
        module,
        inputs,
        is_conv_per_channel=True,
        is_linear_per_channel=False,
        custom_quant_annotations=(),
        quant_dtype=None,
        block_size_map=None,
        submodule_qconfig_list=None,
    ):
        import torchao
        from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

        m = torch.export.export(module, inputs, strict=True).module()
        quantizer = make_quantizer(
            quant_dtype,
            custom_quant_annotations,
            is_conv_per_channel,
            is_linear_per_channel,
            is_qat=True,
            submodule_qconfig_list=submodule_qconfig_list,
        )
        if block_size_map is not None:
            quantizer.set_block_size_map(block_size_map)
        return torchao.quantization.pt2e.move_exported_model_to_train(prepare_qat_pt2e(m, quantizer))

    def get_converted_sgd_trained_module(self, ori_module, prepared, inputs):
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

        optimizer = torch.optim.SGD(prepared.parameters(), lr=0.0001)
        output = prepared(*inputs)
        loss = torch.nn.CrossEntropyLoss()(output, ori_module(*inputs))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return convert_pt2e(prepared)

    def get_adb_tool(self, *args, **kwargs):
        raise uc.Unsupported("the case drives a device through adb (get_adb_tool)")

    # -- the case ------------------------------------------------------------------------------
    def lower_module_and_test_output(
        self,
        module,
        sample_inputs,
        expected_partitions=1,
        expected_profile_events=-1,
        expected_compared_events=-1,
        assert_output_equal=True,
        passes_job=None,
        skip_node_id_set=None,
        skip_node_op_set=None,
        skip_mutable_buffer=False,
        dynamic_shapes=None,
        **unused,
    ):
        index = len(self.cases)
        self.cases.append(" / ".join(self.labels))
        if self.target != index:
            return
        to_conv = bool(passes_job and passes_job.get(ConvertLinearToConv2d, {}).get(ACTIVATE))
        check = assert_output_equal or expected_profile_events != -1 or expected_compared_events != -1
        raise CaseDone(
            run_case(
                module,
                sample_inputs,
                self.compiler_specs,
                dict(
                    dynamic_shapes=dynamic_shapes,
                    skip_node_id_set=skip_node_id_set,
                    skip_node_op_set=skip_node_op_set,
                    skip_mutable_buffer=skip_mutable_buffer,
                    convert_linear_to_conv2d=to_conv,
                ),
                expected_partitions,
                check,
                type(self).atol,
                type(self).rtol,
            )
        )


def _error(reason: str, exc: BaseException) -> Dict:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return {"status": "error", "reason": reason, "message": " | ".join(text[:3])[:600]}


def _clone(value):
    return value.clone() if isinstance(value, torch.Tensor) else value


def split_mutations(edge, got: List[torch.Tensor], eager_inputs: List) -> Tuple[List[torch.Tensor], Optional[str]]:
    """ExecuTorch returns the new value of every user input the program mutates (an in-place op
    on an input: USER_INPUT_MUTATION outputs, first) before the user outputs, whatever the
    backend (portable and XNNPACK alike); eager returns the user outputs and mutates its input.
    (the user outputs, None or what differs between a mutation output and eager's input)."""
    from torch.export.graph_signature import InputKind, OutputKind

    signature = edge.exported_program().graph_signature
    user_inputs = [s.arg.name for s in signature.input_specs if s.kind == InputKind.USER_INPUT]
    mutations = [s.target for s in signature.output_specs if s.kind == OutputKind.USER_INPUT_MUTATION]
    for k, target in enumerate(mutations):
        want = eager_inputs[user_inputs.index(target)]
        if k >= len(got) or not torch.allclose(got[k].reshape(want.shape).to(want.dtype), want, atol=1e-2, rtol=1e-2):
            return got[len(mutations) :], f"mutated input '{target}' differs from eager's"
    return got[len(mutations) :], None


def run_case(module, inputs, specs, lower_kwargs, expected_partitions, check, atol, rtol) -> Dict:
    """Quantize (deferred), lower, run on the engine and compare; the result dict."""
    from executorch.runtime import Runtime

    try:
        module = module.materialize() if isinstance(module, Lazy) else module
    except uc.Unsupported as exc:
        return {"status": "skip", "reason": "harness", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - every failure is a case result
        return _error("quantize", exc)
    try:
        edge = ours.to_edge_transform_and_lower_to_qnn(module, inputs, specs, **lower_kwargs)
        on_cpu = cpu_ops(edge)
        program = edge.to_executorch()
    except ours.QnnLoweringError as exc:
        return _error("no-cpu-kernel" if "no CPU kernel" in str(exc) else "lowering", exc)
    except Exception as exc:  # noqa: BLE001
        return _error("export" if "export" in traceback.format_exc(limit=-3) else "lowering", exc)
    delegates = [d.id for d in program.executorch_program.execution_plan[0].delegates]
    try:
        eager_inputs = torch.utils._pytree.tree_map(_clone, inputs)  # an in-place module mutates them
        ref = _flatten(module(*eager_inputs))
        loaded = Runtime.get().load_program(program.buffer)  # alive while its method runs
        method = loaded.load_method("forward")
        flat_inputs = torch.utils._pytree.tree_flatten(inputs)[0]  # the program's inputs: nested ones flattened
        got = _flatten(method.execute([_clone(x) for x in flat_inputs]))
        got, mutation_problem = split_mutations(edge, got, torch.utils._pytree.tree_flatten(eager_inputs)[0])
    except Exception as exc:  # noqa: BLE001
        return {**_error("runtime", exc), "cpu_ops": on_cpu}
    if len(delegates) != expected_partitions or any(d != "QnnDelegate" for d in delegates):
        return {
            "status": "fail",
            "reason": "partitions",
            "message": f"{len(delegates)} delegates, upstream expects {expected_partitions}; on the CPU: {sorted(set(on_cpu))}",
            "cpu_ops": on_cpu,
        }
    problem = (mutation_problem or compare(got, ref, atol, rtol)) if check else None
    if problem:
        return {"status": "fail", "reason": "numerics", "message": problem, "cpu_ops": on_cpu}
    return {"status": "pass", "reason": "", "message": "", "cpu_ops": on_cpu}


class Harness:
    """Upstream's sources parsed once per worker."""

    def __init__(self, engine: str, test_source: Optional[str] = None, models_source: Optional[str] = None) -> None:
        """`test_source` / `models_source`: upstream's test_qnn_delegate.py / models.py (read from
        the executorch wheel when None)."""
        ours.set_runtime_option("qnn_runtime_engine", engine)
        if test_source is None or models_source is None:
            folder = uc.upstream_tests_dir()
            test_source = (folder / "test_qnn_delegate.py").read_text()
            models_source = (folder / "models.py").read_text()
        self.engine = engine
        self.methods = {(m.cls, m.name): m for m in uc.test_methods(test_source)}
        self.setups = uc.class_setups(test_source)
        table = stubs()
        self.namespace = uc.load_models(models_source, table)
        self.namespace.update(table)
        self.namespace.update(
            __stub__=uc.stub_lookup(table),
            torch=torch,
            itertools=itertools,
            unittest=unittest,
            tempfile=tempfile,
            json=json,
            operator=operator,
            Tuple=Tuple,
            TestQNN=ReplaySelf,
        )
        self._add_optional_names()

    def _add_optional_names(self) -> None:
        """Names upstream's test module imports from outside its backend (torchao, executorch's
        example models); one that does not import here is a Missing (its cases are skipped)."""
        optional = {
            "SharedQuantizationSpec": ("torchao.quantization.pt2e.quantizer", "SharedQuantizationSpec"),
            "disable_validation": ("executorch.exir.backend.backend_api", "disable_validation"),
            "MV2Model": ("executorch.examples.models.mobilenet_v2", "MV2Model"),
            "MV3Model": ("executorch.examples.models.mobilenet_v3", "MV3Model"),
            "DeepLabV3ResNet101Model": ("executorch.examples.models.deeplab_v3", "DeepLabV3ResNet101Model"),
            "EdsrModel": ("executorch.examples.models.edsr", "EdsrModel"),
            "InceptionV3Model": ("executorch.examples.models.inception_v3", "InceptionV3Model"),
            "InceptionV4Model": ("executorch.examples.models.inception_v4", "InceptionV4Model"),
            "Wav2LetterModel": ("executorch.examples.models.wav2letter", "Wav2LetterModel"),
            "TorchVisionViTModel": ("executorch.examples.models.torchvision_vit.model", "TorchVisionViTModel"),
        }
        import importlib

        for name, (module, attr) in optional.items():
            try:
                self.namespace[name] = getattr(importlib.import_module(module), attr)
            except Exception:  # noqa: BLE001 - e.g. needs torchvision, absent here
                self.namespace[name] = uc.Missing(f"{name} (from {module}: does not import here)")

    def _call(self, cls: str, test: str, target: Optional[int]) -> ReplaySelf:
        method = self.methods[(cls, test)]
        fake = ReplaySelf(self.setups[cls], self.engine, target)
        torch.manual_seed(0)
        uc.compile_method(method, self.namespace)(fake)
        return fake

    def enumerate(self, cls: str, test: str) -> Dict:
        try:
            fake = self._call(cls, test, None)
        except unittest.SkipTest as exc:
            return {"error": {"status": "skip", "reason": "upstream-skip", "message": str(exc)}}
        except uc.Unsupported as exc:
            return {"error": {"status": "skip", "reason": "harness", "message": str(exc)}}
        except Exception as exc:  # noqa: BLE001
            return {"error": _error("enumerate", exc)}
        if not fake.cases:
            return {"error": {"status": "skip", "reason": "harness", "message": "no lower_module_and_test_output call"}}
        return {"cases": fake.cases}

    def replay(self, cls: str, test: str, index: int) -> Dict:
        try:
            self._call(cls, test, index)
        except CaseDone as done:
            return done.result
        except unittest.SkipTest as exc:
            return {"status": "skip", "reason": "upstream-skip", "message": str(exc)}
        except uc.Unsupported as exc:
            return {"status": "skip", "reason": "harness", "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 - e.g. the test body's own assertions
            return _error("test-body", exc)
        return {"status": "error", "reason": "harness", "message": f"case {index} was not reached"}
