"""Node-meta keys shared by passes and builders (the only place they are spelled)."""

# Stored layout of a node's output tensor; value is one of the LAYOUT_* below.
QCOM_LAYOUT = "qcom_layout"
LAYOUT_CHANNEL_FIRST = "channel_first"
LAYOUT_CHANNEL_LAST = "channel_last"

# Debug handle given to call_function nodes by ExecuTorch's to_edge.
DEBUG_HANDLE = "debug_handle"

# Compile-spec key of the serialized QnnExecuTorchOptions flatbuffer.
QCOM_COMPILE_SPEC_KEY = "qnn_compile_spec"

# Compile-spec key of a delegate's shard index (ASCII digits; set by QnnPartitioner(shard_layers=...)):
# with use_multi_contexts the delegates of shard k of every method share context k.
QCOM_SHARD_SPEC_KEY = "qnn_shard"
# Layer number of a node for sharding: group 1 of this regex on its nn_module_stack path (upstream's).
DEFAULT_SHARD_PATTERN = r"layers\.(\d+)"

# Backend id written into the .pte (the BackendDetails subclass name).
QNN_BACKEND_ID = "QnnDelegate"

# Permutations between channel-first (NCHW) and channel-last (NHWC) for rank 4.
NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)
# Ranks stored channel-last when a layout-sensitive op needs it: NWC (conv1d), NHWC, NDHWC (conv3d).
CHANNEL_LAST_RANKS = (3, 4, 5)


def channel_last_perm(rank: int) -> tuple:
    """Channel-first (N, C, *spatial) -> channel-last (N, *spatial, C) of a `rank` tensor."""
    return (0, *range(2, rank), 1)


def channel_first_perm(rank: int) -> tuple:
    """Channel-last (N, *spatial, C) -> channel-first (N, C, *spatial) of a `rank` tensor."""
    return (0, rank - 1, *range(1, rank - 1))


# Layout in which a node reads its rank-4 activation inputs (set by the layout pass).
QCOM_INPUT_LAYOUT = "qcom_input_layout"

# Set by the partitioner on placeholders that hold params/buffers/lifted constants.
QCOM_CONSTANT = "qcom_constant"
# an int64 constant placeholder holding values outside int32 (QNN narrows INT_64 to INT_32)
QCOM_BEYOND_INT32 = "qcom_beyond_int32"

# Conv padding [[top, bottom], [left, right]] after a zero pad was folded into it.
QCOM_PAD_AMOUNT = "qcom_pad_amount"

# Quantization (set by the quant passes, read by builders): encoding of a node's output
# tensor (or of a constant placeholder's data), a QuantAttrs instance.
QCOM_QUANT_ATTRS = "qcom_quant_attrs"
# Encoding of the input of a dequantize node (set by AnnotateQuantAttrs).
QCOM_DEQUANT_ATTRS = "qcom_dequant_attrs"
# Linear nodes marked by the opt-in ConvertLinearToConv2d edge pass (rewritten in preprocess).
QCOM_LINEAR_AS_CONV = "qcom_linear_as_conv"
# dtypes the edge graph expects of a delegated program's outputs, recorded (on the output
# node) before FoldQDQ replaces quantize outputs by their producers (insert_io_qdq.py).
QCOM_OUTPUT_DTYPES = "qcom_output_dtypes"
# ... and their dim orders ([] = contiguous): the delegate writes outputs in the caller's order.
QCOM_OUTPUT_DIM_ORDERS = "qcom_output_dim_orders"
