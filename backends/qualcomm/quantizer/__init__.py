"""QnnQuantizer (torchao PT2E) and its quant dtypes."""
from backends.qualcomm.quantizer.qconfig import QuantDtype
from backends.qualcomm.quantizer.quantizer import QnnQuantizer

__all__ = ["QnnQuantizer", "QuantDtype"]
