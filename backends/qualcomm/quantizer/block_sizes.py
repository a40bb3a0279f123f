"""set_block_size_map entries: upstream's tuple form (one entry per weight dim, e.g.
{"conv2d": (1, 16, 1, 1)}) and our int form (input channels per block). Checked when set
(type, > 0) and when the graph is known (node exists, is a conv/linear, shape fits)."""
from __future__ import annotations

import difflib
from typing import Dict, Iterable, Tuple, Union

from torch.fx import Node

BlockSize = Union[int, Tuple[int, ...]]


def normalize_block_size(name: str, value: object) -> BlockSize:
    """int > 0, or a tuple of ints > 0; anything else raises ValueError naming the node."""
    if isinstance(value, bool):
        raise ValueError(f"set_block_size_map: block size of node '{name}' must be an int or a tuple, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"set_block_size_map: block size of node '{name}' must be > 0, got {value}")
        return value
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          for v in value):
        if any(v <= 0 for v in value):
            raise ValueError(f"set_block_size_map: block size of node '{name}' must be > 0 in every "
                             f"dim, got {tuple(value)}")
        return tuple(value)
    raise ValueError(f"set_block_size_map: block size of node '{name}' must be an int or a tuple of "
                     f"ints, got {value!r}")


def unknown_node_error(missing: Iterable[str], candidates: Iterable[str]) -> ValueError:
    """ValueError naming the nodes the graph does not have and the closest conv/linear names."""
    candidates = sorted(candidates)
    parts = []
    for name in sorted(missing):
        close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.4)
        parts.append(f"'{name}'" + (f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""))
    return ValueError(f"set_block_size_map: no node named {', '.join(parts)} in the graph; "
                      f"conv/linear nodes: {', '.join(candidates) or 'none'}")


def weight_block_size(node: Node, block: BlockSize) -> Tuple[int, ...]:
    """Torch block size (1, b, *kernel) of a conv/linear weight [Cout, Cin, ...]; raises
    ValueError naming the node when the entry does not fit the weight."""
    shape = tuple(node.args[1].meta["val"].shape)
    if isinstance(block, int):
        block = (1, block) + shape[2:]
    if len(block) != len(shape):
        raise ValueError(f"set_block_size_map: block size {block} of node '{node.name}' needs one entry "
                         f"per weight dim, weight shape {shape}")
    if block[0] != 1 or tuple(block[2:]) != shape[2:]:
        raise ValueError(f"set_block_size_map: block size {block} of node '{node.name}' is not supported: "
                         f"LPBQ blocks the input channels (dim 1) only, so it must be "
                         f"(1, b{''.join(', ' + str(d) for d in shape[2:])}) for weight shape {shape}")
    if shape[1] % block[1]:
        raise ValueError(f"set_block_size_map: block size {block[1]} of node '{node.name}' does not "
                         f"divide its input channels {shape[1]}")
    return tuple(block)


# Why a transposed conv takes no LPBQ weights (it keeps per-output-channel weights of the
# dtype's width, 4-bit under 16a4w_block).
TRANSPOSED_LPBQ_REASON = (
    "LPBQ (block) weights are not supported for transposed convolutions: their weight [Cin, "
    "Cout/group, k..] has its blocks along Cin (axis 0) and its per-channel scales along Cout "
    "(axis 1), and neither the LPBQ observer nor the BLOCKWISE_EXPANSION lowering handles that "
    "layout (QNN's LPBQ is only measured correct on FullyConnected); under 16a4w_block they keep "
    "4-bit per-output-channel weights")


def check_names(block_size_map: Dict[str, BlockSize], nodes: Dict[str, Node], weighted: Iterable[object],
                transposed: Iterable[object] = ()) -> None:
    """Every entry names a conv/linear node of the graph (not a transposed conv)."""
    weighted, transposed = set(weighted), set(transposed)
    names = {n for n, node in nodes.items() if node.target in weighted}
    missing = [n for n in block_size_map if n not in nodes]
    if missing:
        raise unknown_node_error(missing, names)
    refused = [n for n in block_size_map if nodes[n].target in transposed]
    if refused:
        raise ValueError(f"set_block_size_map: node(s) {', '.join(repr(n) for n in refused)}: "
                         f"{TRANSPOSED_LPBQ_REASON}")
    wrong = [n for n in block_size_map if n not in names]
    if wrong:
        raise ValueError(f"set_block_size_map: node(s) {', '.join(repr(n) for n in wrong)} are not "
                         f"conv/linear (targets: {', '.join(str(nodes[n].target) for n in wrong)}); "
                         f"conv/linear nodes: {', '.join(sorted(names)) or 'none'}")
