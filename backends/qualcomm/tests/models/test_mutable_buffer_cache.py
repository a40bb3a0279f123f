"""In-graph KV caches: a program whose graph writes registered buffers (ExecuTorch's mutable
buffers) in place, as ExecuTorch's llama export (`index_put_` on `self.k_cache`) and Hugging
Face's `StaticCache` (`index_copy_`) do. The cache writes and the attention are one delegate; the
caches stay ExecuTorch mutable buffers that the delegate reads as inputs and returns updated, and
ExecuTorch writes them back (one `copy_` per buffer per call: docs/llm.md). Asserted: over several
calls the cache persists and every step's output equals eager's (whose buffers persist the same
way), on the host engine and on QNN."""

from __future__ import annotations

import copy
import math
from typing import List, Tuple

import numpy as np
import pytest
import torch
from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

from backends.qualcomm import QnnPartitioner
from backends.qualcomm.serialization.payload_reader import describe_payload
from backends.qualcomm.tests.helpers.runtime import load_method, native, run
from backends.qualcomm.utils.pte_tools import delegate_blobs
from backends.qualcomm.tests.helpers.tester import fp16_compile_specs

transformers = pytest.importorskip("transformers")


class StaticCacheAttention(torch.nn.Module):
    """ExecuTorch llama's static-cache attention: the step's keys / values written into the
    cache buffers at `input_pos` (`index_put_` and `cache[:, :, pos] = v`), a causal mask from
    the positions, attention over the whole cache."""

    def __init__(self, dim: int = 16, heads: int = 2, slots: int = 8):
        super().__init__()
        self.heads, self.head_dim, self.slots = heads, dim // heads, slots
        self.q, self.k, self.v, self.o = (torch.nn.Linear(dim, dim) for _ in range(4))
        self.register_buffer("k_cache", torch.zeros(1, heads, slots, dim // heads))
        self.register_buffer("v_cache", torch.zeros(1, heads, slots, dim // heads))

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        torch.ops.aten.index_put_(self.k_cache, [None, None, input_pos], k)
        self.v_cache[:, :, input_pos] = v
        mask = torch.arange(self.slots).view(1, -1) <= input_pos.view(-1, 1)
        scores = (q @ self.k_cache.transpose(-1, -2)) / math.sqrt(self.head_dim)
        out = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ self.v_cache
        return self.o(out.transpose(1, 2).reshape(b, t, -1))


class HfStaticCacheStep(torch.nn.Module):
    """One decode step of a tiny Llama with Hugging Face's StaticCache (transformers' own
    ExecuTorch wrapper): the cache is the wrapper's registered buffers, written by index_copy_."""

    def __init__(self, max_cache_len: int = 16):
        super().__init__()
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=128,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
        model = transformers.LlamaForCausalLM(config).eval().requires_grad_(False)
        model.generation_config.cache_implementation = "static"
        self.model = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=max_cache_len)

    def forward(self, ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, cache_position=cache_position)


def _lower(module: torch.nn.Module, inputs: Tuple[torch.Tensor, ...], tmp_path, strict: bool = False):
    """(edge program, .pte path, partitioner); the caches' initial values are serialized
    (InitializedMutableBufferPass, as ExecuTorch's llama export does)."""
    partitioner = QnnPartitioner(fp16_compile_specs())
    with torch.no_grad():
        exported = torch.export.export(module, inputs, strict=strict)
    edge = to_edge_transform_and_lower(
        exported, partitioner=[partitioner], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    program = edge.to_executorch(ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["cache"])]))
    path = tmp_path / "model.pte"
    path.write_bytes(program.buffer)
    operators = [op.name for op in program.executorch_program.execution_plan[0].operators]
    return edge, path, partitioner, operators


def _steps_equal_eager(path, eager: torch.nn.Module, steps: List[Tuple[torch.Tensor, ...]], atol: float) -> None:
    """Each call of the .pte against the same call of eager (both keep their caches)."""
    _, method = load_method(path)
    for i, inputs in enumerate(steps):
        got = run(method, inputs)[0]
        with torch.no_grad():
            expected = eager(*inputs)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=atol, rtol=0, err_msg=f"step {i}")


def _decode_steps(n: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(1, 1, 16, generator=g), torch.tensor([p])) for p in range(n)]


def test_static_cache_attention_is_one_delegate_and_persists(tmp_path):
    """5 decode steps: step i attends to the keys written by steps 0..i (a cache that did not
    persist, or was written back wrongly, gives another output from step 1 on)."""
    torch.manual_seed(0)
    module = StaticCacheAttention().eval().requires_grad_(False)
    eager = copy.deepcopy(module)
    steps = _decode_steps(5)
    edge, path, partitioner, operators = _lower(module, steps[0], tmp_path)
    assert len(delegate_blobs(edge.exported_program().graph_module)) == 1, partitioner.rejected_nodes
    assert not partitioner.rejected_nodes, partitioner.rejected_nodes
    assert operators == ["aten::copy_"], operators  # the write-back of the two caches, nothing else
    _steps_equal_eager(path, eager, steps, atol=2e-3)


def test_hf_static_cache_decoder_is_one_delegate_and_persists(tmp_path):
    """HF StaticCache: the caches (index_copy_ -> ScatterNd), the decoder and the position
    bookkeeping (`cumulative_length.copy_(cache_position[0])`) are one delegate; on the CPU only
    the write-back. (With QNN's op validation the rank-0 bookkeeping stays on the CPU: HTP refuses
    rank-0 tensors.)"""
    module = HfStaticCacheStep().eval()
    eager = copy.deepcopy(module)
    steps = [(torch.tensor([[t]]), torch.tensor([p])) for p, t in enumerate([5, 17, 99, 3, 64])]
    edge, path, partitioner, operators = _lower(module, steps[0], tmp_path, strict=True)
    graphs = [describe_payload(b)[0] for b in delegate_blobs(edge.exported_program().graph_module)]
    assert len(graphs) == 1, [g.op_types() for g in graphs]
    types = graphs[0].op_types()
    assert types["ScatterNd"] == 4 and types["MatMul"] == 4 and types["Softmax"] == 2, types  # 2 layers
    assert operators == ["aten::copy_"], operators
    _steps_equal_eager(path, eager, steps, atol=2e-3)


def test_static_cache_attention_quantized_persists(tmp_path):
    """16a8w: the QDQ module (calibrated on the 5 steps, caches zeroed again) and the .pte run the
    same 5 steps, each keeping its caches: every step within 16 output steps (1/16 of an 8-bit
    step, quant_tester's 16-bit bound; measured: at most 3)."""
    from backends.qualcomm import QnnQuantizer, QuantDtype
    from backends.qualcomm.tests.helpers.quant_tester import output_encodings, quant_compile_specs, quantize_module

    steps = _decode_steps(5)
    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_16a8w)
    torch.manual_seed(0)
    module = StaticCacheAttention().eval().requires_grad_(False)
    converted = quantize_module(module, steps[0], quantizer, steps)
    for name, buffer in converted.named_buffers():
        if "cache" in name:
            buffer.zero_()  # calibration wrote into them
    reference = copy.deepcopy(converted)
    partitioner = QnnPartitioner(quant_compile_specs(QuantDtype.use_16a8w))
    with torch.no_grad():
        exported = torch.export.export(converted, steps[0], strict=False)
    edge = to_edge_transform_and_lower(
        exported, partitioner=[partitioner], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    assert len(delegate_blobs(edge.exported_program().graph_module)) == 1 and not partitioner.rejected_nodes
    program = edge.to_executorch(ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["cache"])]))
    path = tmp_path / "model.pte"
    path.write_bytes(program.buffer)
    scale = output_encodings(converted)[0][0]
    _steps_equal_eager(path, reference, steps, atol=16 * scale)


def test_static_cache_attention_persists_on_qnn(real_qnn, tmp_path):
    """The same program run by QNN's HTP (context binary, x86 emulation): 4 steps equal eager."""
    torch.manual_seed(0)
    module = StaticCacheAttention().eval().requires_grad_(False)
    eager = copy.deepcopy(module)
    steps = _decode_steps(4)
    _, path, _, _ = _lower(module, steps[0], tmp_path)
    native().set_runtime_option("qnn_runtime_engine", "qnn")
    try:
        _steps_equal_eager(path, eager, steps, atol=5e-3)
    finally:
        native().set_runtime_option("qnn_runtime_engine", "auto")
