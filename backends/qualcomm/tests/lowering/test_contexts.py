"""Contexts of a program and `use_multi_contexts`.

Upstream, `use_multi_contexts` makes the contexts of one .pte share a single spill-fill
buffer on a real HTP; this delegate has no equivalent, so lowering rejects the flag with a
message saying so instead of silently ignoring it. Context counts: without weight sharing
every partition is its own context; with `use_weight_sharing` the partitions of a program
share one."""

from __future__ import annotations

import pytest
import torch

from backends.qualcomm.qnn_preprocess import MULTI_CONTEXTS_MESSAGE
from backends.qualcomm.tests.helpers import runtime as h
from backends.qualcomm.utils.errors import QnnLoweringError
from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn

SKIP_SIGMOID = {"aten.sigmoid.default"}  # SplitNet: the sigmoid on the CPU splits it in two
ATOL = 1e-2


def _contexts_while_loaded(pte, model, x) -> int:
    """Live contexts added by loading `pte` (outputs checked against eager on the way)."""
    base = h.native().live_context_count()
    program, method = h.load_method(pte)
    loaded = h.native().live_context_count() - base
    torch.testing.assert_close(h.run(method, [x])[0], model(x), atol=ATOL, rtol=ATOL)
    h.release(program, method)
    del program, method
    h.release()
    assert h.native().live_context_count() == base
    return loaded


def test_use_multi_contexts_is_rejected():
    model, x = h.SplitNet().eval(), torch.randn(1, 3, 12, 12)
    with pytest.raises(QnnLoweringError) as raised:
        to_edge_transform_and_lower_to_qnn(
            model, (x,), h.fp16_specs(use_multi_contexts=True), skip_node_op_set=SKIP_SIGMOID
        )
    assert MULTI_CONTEXTS_MESSAGE in str(raised.value)


@pytest.mark.parametrize("weight_sharing, contexts", [(False, 2), (True, 1)])
def test_context_count_of_two_partitions(tmp_path, weight_sharing, contexts):
    torch.manual_seed(3)
    model, x = h.SplitNet().eval(), torch.randn(1, 3, 12, 12)
    pte = h.lower_to_pte(
        model,
        (x,),
        tmp_path / "split.pte",
        h.fp16_specs(use_weight_sharing=weight_sharing),
        skip_node_op_set=SKIP_SIGMOID,
    )
    assert _contexts_while_loaded(pte, model, x) == contexts
