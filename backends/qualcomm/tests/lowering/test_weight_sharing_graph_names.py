"""Graph names of weight-shared methods: unique across the methods of one context (a method
named like another method's second graph), duplicates refused."""

from __future__ import annotations

import pytest
import torch

from backends.qualcomm.tests.helpers.tester import randn
from backends.qualcomm.utils.pte_tools import delegate_blobs

# ---- partition summary -------------------------------------------------------------------------
SKIP_CUMSUM = {"aten.cumsum.default"}  # cumsum has a builder: kept on the CPU to split graphs


# ---- weight sharing: graph names unique by construction ----------------------------------------
class TwoPartitions(torch.nn.Module):
    """linear -> cumsum (CPU: SKIP_CUMSUM) -> linear: two delegates."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc2(torch.cumsum(self.fc1(x), dim=1))


class TestWeightSharingGraphNames:
    def test_method_named_like_another_methods_second_graph(self, tmp_path):
        from executorch.exir.lowered_backend_module import get_lowered_submodules
        from executorch.runtime import Runtime

        from backends.qualcomm import (
            QcomChipset,
            describe_payload,
            generate_htp_compiler_spec,
            generate_qnn_executorch_compiler_spec,
            to_edge_transform_and_lower_to_qnn,
        )
        from backends.qualcomm.utils.compile_spec import graph_names, options_from_compile_specs

        torch.manual_seed(1)
        modules = {
            "dec": TwoPartitions(0).eval(),
            "dec_1": torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8)).eval(),
        }
        inputs = {"dec": (randn(2, 8, seed=3),), "dec_1": (randn(2, 8, seed=4),)}
        specs = generate_qnn_executorch_compiler_spec(
            QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=True, use_weight_sharing=True)
        )
        edge = to_edge_transform_and_lower_to_qnn(modules, inputs, specs, skip_node_op_set=SKIP_CUMSUM)
        chosen = {}
        for method in ("dec", "dec_1"):
            lowered = [lw for _, lw, _ in get_lowered_submodules(edge.exported_program(method).graph_module)]
            chosen[method] = [graph_names(options_from_compile_specs(lw.compile_specs))[0] for lw in lowered]
        assert chosen == {"dec": ["dec", "dec_1_2"], "dec_1": ["dec_1"]}
        blob = delegate_blobs(edge, "dec")[0]
        assert sorted(g.name for g in describe_payload(blob)) == ["dec", "dec_1", "dec_1_2"]
        pte = tmp_path / "shared.pte"
        edge.to_executorch().write_to_file(open(pte, "wb"))
        program = Runtime.get().load_program(str(pte))
        for method, module in modules.items():
            got = program.load_method(method).execute(list(inputs[method]))[0]
            with torch.no_grad():
                want = module(*inputs[method])
            torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)

    def test_duplicate_graph_names_raise(self):
        from backends.qualcomm import QnnLoweringError
        from backends.qualcomm.serialization.qnn_graph import QnnGraph
        from backends.qualcomm.utils.weight_sharing import check_unique_graph_names

        check_unique_graph_names([QnnGraph("dec", fp16_precision=True), QnnGraph("dec_1", fp16_precision=True)])
        with pytest.raises(QnnLoweringError, match=r"graph name\(s\) \['dec_1'\] are used by more than one graph"):
            check_unique_graph_names(
                [
                    QnnGraph("dec_1", fp16_precision=True),
                    QnnGraph("dec", fp16_precision=True),
                    QnnGraph("dec_1", fp16_precision=True),
                ]
            )
