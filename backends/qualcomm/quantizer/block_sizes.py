"""set_block_size_map entries: upstream's tuple form (one entry per weight dim, e.g.
{"conv2d": (1, 16, 1, 1)}) and our int form (input channels per block). Checked when set
(type, > 0) and when the graph is known (node exists, is a conv/linear, shape fits)."""

from __future__ import annotations

import difflib
from typing import Dict, Iterable, Tuple, Union

import torch
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
    if (
        isinstance(value, (tuple, list))
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        if any(v <= 0 for v in value):
            raise ValueError(
                f"set_block_size_map: block size of node '{name}' must be > 0 in every dim, got {tuple(value)}"
            )
        return tuple(value)
    raise ValueError(
        f"set_block_size_map: block size of node '{name}' must be an int or a tuple of ints, got {value!r}"
    )


def unknown_node_error(missing: Iterable[str], candidates: Iterable[str]) -> ValueError:
    """ValueError naming the nodes the graph does not have and the closest conv/linear names."""
    candidates = sorted(candidates)
    parts = []
    for name in sorted(missing):
        close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.4)
        parts.append(f"'{name}'" + (f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""))
    return ValueError(
        f"set_block_size_map: no node named {', '.join(parts)} in the graph; "
        f"conv/linear nodes: {', '.join(candidates) or 'none'}"
    )


def transposed_takes_lpbq(node: Node) -> bool:
    """A transposed conv takes LPBQ weights with one group (its weight [Cin, Cout/group, k..]
    holds all Cout channels on axis 1 then) and more than one input channel (a block of 1
    could not be told from a conv's (1, b, ..) block)."""
    return transposed_conv_groups(node) == 1 and int(node.args[1].meta["val"].shape[0]) > 1


def weight_block_size(node: Node, block: BlockSize, transposed: bool = False) -> Tuple[int, ...]:
    """Torch block size (1, b, *kernel) of a conv/linear weight [Cout, Cin, ...] (transposed
    conv: (b, 1, *kernel) of [Cin, Cout, ...]); raises ValueError naming the node when the
    entry does not fit the weight."""
    shape = tuple(node.args[1].meta["val"].shape)
    cin_dim = 0 if transposed else 1
    if transposed and not transposed_takes_lpbq(node):
        raise ValueError(
            f"set_block_size_map: transposed conv '{node.name}' takes no LPBQ weights: {TRANSPOSED_LPBQ_REASON}"
        )
    if isinstance(block, int):
        block = ((block, 1) if transposed else (1, block)) + shape[2:]
    if len(block) != len(shape):
        raise ValueError(
            f"set_block_size_map: block size {block} of node '{node.name}' needs one entry "
            f"per weight dim, weight shape {shape}"
        )
    expected = ("(b, 1" if transposed else "(1, b") + "".join(", " + str(d) for d in shape[2:]) + ")"
    if block[1 - cin_dim] != 1 or tuple(block[2:]) != shape[2:] or (transposed and block[0] == 1):
        raise ValueError(
            f"set_block_size_map: block size {block} of node '{node.name}' is not supported: "
            f"LPBQ blocks the input channels (dim {cin_dim}) only, so it must be "
            f"{expected} for weight shape {shape}" + (", b > 1" if transposed else "")
        )
    if shape[cin_dim] % block[cin_dim]:
        raise ValueError(
            f"set_block_size_map: block size {block[cin_dim]} of node '{node.name}' does not "
            f"divide its input channels {shape[cin_dim]}"
        )
    return tuple(block)


def transposed_conv_groups(node: Node) -> int:
    position = 8 if node.target == torch.ops.aten.convolution.default else 6
    return int(node.args[position]) if len(node.args) > position else int(node.kwargs.get("groups", 1))


# Why a grouped (or single input channel) transposed conv takes no LPBQ weights.
TRANSPOSED_LPBQ_REASON = (
    "LPBQ needs one group (the weight [Cin, Cout/group, k..] then holds every output channel on "
    "axis 1, whose float scales the blocks along Cin share) and more than one input channel"
)


def check_names(block_size_map: Dict[str, BlockSize], nodes: Dict[str, Node], weighted: Iterable[object]) -> None:
    """Every entry names a conv / transposed conv / linear node of the graph."""
    weighted = set(weighted)
    names = {n for n, node in nodes.items() if node.target in weighted}
    missing = [n for n in block_size_map if n not in nodes]
    if missing:
        raise unknown_node_error(missing, names)
    wrong = [n for n in block_size_map if n not in names]
    if wrong:
        raise ValueError(
            f"set_block_size_map: node(s) {', '.join(repr(n) for n in wrong)} are not "
            f"conv/linear (targets: {', '.join(str(nodes[n].target) for n in wrong)}); "
            f"conv/linear nodes: {', '.join(sorted(names)) or 'none'}"
        )
