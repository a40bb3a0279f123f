"""QNN op types the builders may emit: one list, checked against OPS.md and the
runtime's kernel registry by a test, and against every op a builder adds."""

QNN_OP_TYPES: frozenset[str] = frozenset({
    "Conv2d", "DepthWiseConv2d", "FullyConnected", "MatMul",
    "ElementWiseAdd", "ElementWiseSubtract", "ElementWiseMultiply", "ElementWiseDivide",
    "ElementWisePower", "ElementWiseRsqrt", "ElementWiseSquareRoot", "ElementWiseNeg",
    "Relu", "ReluMinMax", "Sigmoid", "Tanh", "Gelu", "HardSwish",
    "Softmax", "LayerNorm", "Batchnorm", "ReduceMean", "ReduceSum",
    "PoolAvg2d", "PoolMax2d",
    "Reshape", "Transpose", "Concat", "StridedSlice", "Gather", "Tile", "Cast", "TopK",
})

# Quantization ops (OPS.md "Quantized graphs", QNN_QUANT_OP_TYPES).
QNN_QUANT_OP_TYPES: frozenset[str] = frozenset({"Quantize", "Dequantize", "Convert"})
