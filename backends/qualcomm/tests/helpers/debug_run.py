"""The intermediate-output debugger end to end, as its tests use it: lower with dumping on, save
the .pte and ETRecord, run once with ETDump, compare (optionally with one conv damaged)."""

from __future__ import annotations

import torch

from backends.qualcomm.debugger import SQNRComparator
from backends.qualcomm.utils.pte_tools import delegate_blobs


def debug_specs(fp16: bool, dump: bool) -> list:
    from backends.qualcomm import QcomChipset, generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec

    return generate_qnn_executorch_compiler_spec(
        QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=fp16), dump_intermediate_outputs=dump
    )


def quantize_8a8w(module, sample):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from backends.qualcomm import QnnQuantizer, QuantDtype

    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True)
    prepared = prepare_pt2e(torch.export.export(module.eval(), sample, strict=False).module(), quantizer)
    prepared(*sample)
    return convert_pt2e(prepared)


class DebugRun:
    """Lower (dumping on), save .pte + ETRecord, run once with ETDump, compare."""

    def __init__(self, module, sample, folder, quantized=False, comparator=None, damage_node=None):
        import contextlib

        from backends.qualcomm import to_edge_transform_and_lower_to_qnn
        from backends.qualcomm.debugger import QNNIntermediateDebugger
        from qnn_models.damage import damage_conv_weights_in_delegate

        module = quantize_8a8w(module, sample) if quantized else module.eval()
        damage = damage_conv_weights_in_delegate(damage_node) if damage_node else contextlib.nullcontext()
        with damage:
            self.edge = to_edge_transform_and_lower_to_qnn(
                module, sample, debug_specs(not quantized, True), generate_etrecord=True
            )
        self.blobs = delegate_blobs(self.edge)
        self.debugger = QNNIntermediateDebugger(sample)
        self.pte = self.debugger.save(self.edge, str(folder))
        self.etdump, self.debug_buffer = self.debugger.run(self.pte, str(folder))
        self.report = self.debugger.compare(self.etdump, self.debug_buffer, comparator or SQNRComparator(20.0))

    def payload_handles(self) -> set:
        from backends.qualcomm import describe_payload

        return {
            op.debug_handle for blob in self.blobs for g in describe_payload(blob) for op in g.ops if op.debug_handle
        }
