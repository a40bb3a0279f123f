"""Sharding: split a program's delegated nodes into N shards at layer boundaries.

A shard is a contiguous run of layers (upstream's `num_sharding` / SplitGraph: the layer of a node
is the number its `nn_module_stack` path matches with `pattern`, `layers\\.(\\d+)` by default). The
partitioner cuts every proposed partition where the shard changes, so shard k of a method becomes
its own delegate(s); with `use_multi_contexts` shard k of every method then goes into context k
(utils/weight_sharing.py).

Shard of a node: the shard of its layer when it has one, and never lower than the shards of its
inputs. A node outside any layer (the embedding, the mask and rotary lookups, the final norm and
head, a weight's dequantize, nodes a pass created) goes to the shard of its first consumer, or of
its inputs when that is later: a layer's weights stay in the layer's shard, and a tensor several
shards read (the mask) is computed once, in the first. A quantize node takes its producer's shard,
so a quantized tensor crosses as its integer codes and the next delegate reads exactly what the
unsharded graph would (crossing as float32, the producer's result was rounded to float32 before
being quantized: one 16-bit step off on 0.4% of a tiny Llama's later K / V values). Shards never decrease along an edge, so the
cut partitions form no cycle. A tensor one shard computes and a later one reads (the hidden state, the
mask) becomes an output of the first delegate and an input of the second; ExecuTorch passes it
between them with no CPU op in between.

Unlike upstream (boundaries every `n_layers // N` layers, so 30 layers in 4 shards give 5), the
layers are split into exactly N runs whose sizes differ by at most one (even_shard_layers).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence

import torch
from torch.fx.passes.infra.partitioner import Partition

from backends.qualcomm.builders.quant_encoding import is_quantize
from backends.qualcomm.utils.constants import DEFAULT_SHARD_PATTERN

__all__ = ["DEFAULT_SHARD_PATTERN", "ShardingError", "even_shard_layers", "shard_of_nodes", "split_by_shard"]


class ShardingError(ValueError):
    """A sharding request the graph cannot honour (bad count, no layers, a missing boundary)."""


def even_shard_layers(n_layers: int, num_sharding: int) -> List[int]:
    """The first layer of every shard after the first: N runs of consecutive layers whose sizes
    differ by at most one (the larger ones first). ShardingError for N < 1 or N > n_layers."""
    if isinstance(num_sharding, bool) or not isinstance(num_sharding, int):
        raise ShardingError(f"num_sharding must be an int, got {num_sharding!r}")
    if num_sharding < 1:
        raise ShardingError(f"num_sharding={num_sharding}: needs at least 1 shard")
    if num_sharding > n_layers:
        raise ShardingError(
            f"num_sharding={num_sharding} is more than the model's {n_layers} layer(s): a shard holds at least one layer"
        )
    base, extra = divmod(n_layers, num_sharding)
    starts, first = [], 0
    for k in range(num_sharding - 1):
        first += base + (1 if k < extra else 0)
        starts.append(first)
    return starts


def layer_of(node: torch.fx.Node, pattern: "re.Pattern[str]") -> Optional[int]:
    """The layer number of `node`: the innermost `nn_module_stack` path `pattern` matches."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, *_ in reversed(list(stack.values())):
        found = pattern.search(str(path))
        if found:
            return int(found.group(1))
    return None


def check_shard_layers(shard_layers: Sequence[int]) -> List[int]:
    """`shard_layers` as a sorted list of distinct positive ints; ShardingError otherwise."""
    if isinstance(shard_layers, (str, bytes)) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in shard_layers
    ):
        raise ShardingError(f"shard_layers must be a list of layer numbers (ints), got {shard_layers!r}")
    starts = sorted(set(int(x) for x in shard_layers))
    if any(x < 0 for x in starts):
        raise ShardingError(f"shard_layers {list(shard_layers)}: layer numbers are >= 0")
    return [x for x in starts if x > 0]  # a boundary before layer 0 splits nothing (upstream lists it)


def shard_of_nodes(graph: torch.fx.Graph, shard_layers: Sequence[int], pattern: str) -> Dict[torch.fx.Node, int]:
    """{call_function node: shard index} (see the module docstring). ShardingError when no node
    is in a layer `pattern` matches, or when a boundary layer has no node."""
    starts = check_shard_layers(shard_layers)
    regex = re.compile(pattern)
    layers = {n: layer_of(n, regex) for n in graph.nodes if n.op == "call_function"}
    seen = {layer for layer in layers.values() if layer is not None}
    if not seen:
        raise ShardingError(
            f"sharding: no node of the graph is in a layer matching {pattern!r} (nn_module_stack paths): "
            "this graph has no split points; give the pattern of its numbered layers (e.g. r'blocks\\.(\\d+)')"
        )
    missing = [s for s in starts if s not in seen]
    if missing:
        raise ShardingError(
            f"sharding: boundary layer(s) {missing} not found; the graph's layers matching {pattern!r} are "
            f"{min(seen)}..{max(seen)}"
        )
    floor: Dict[torch.fx.Node, int] = {}
    for node in graph.nodes:  # the lowest shard each node may take: its layer's, its inputs'
        if node.op != "call_function":
            continue
        layer = layers[node]
        own = 0 if layer is None else sum(1 for s in starts if layer >= s)
        floor[node] = max([own] + [floor[a] for a in node.all_input_nodes if a in floor])
    shard: Dict[torch.fx.Node, int] = {}
    for node in reversed(list(floor)):  # a node outside layers moves up to its first consumer's shard
        users = [shard[u] for u in node.users if u in shard]
        shard[node] = floor[node] if layers[node] is not None or not users else max(floor[node], min(users))
    for node in floor:  # a quantize stays with the node it quantizes: the codes cross, not floats
        if is_quantize(node) and node.args and node.args[0] in floor:
            shard[node] = shard[node.args[0]]
    return shard


def split_by_shard(partitions: List[Partition], shard: Dict[torch.fx.Node, int]) -> Dict[int, List[Partition]]:
    """Every partition cut where the shard changes: {shard index: its partitions}. A quantize
    node stays in its producer's piece (shard_of_nodes): the two delegates exchange the quantized
    tensor, with the same encoding at both ends (_passes/insert_io_qdq.py)."""
    pieces: List[Partition] = []
    owner: List[int] = []
    next_id = 0
    for partition in partitions:
        by_shard: Dict[int, List[torch.fx.Node]] = {}
        for node in partition.nodes:
            by_shard.setdefault(shard.get(node, 0), []).append(node)
        for k in sorted(by_shard):
            pieces.append(Partition(id=next_id, nodes=by_shard[k]))
            owner.append(k)
            next_id += 1
    result: Dict[int, List[Partition]] = {}
    for piece, k in zip(pieces, owner):
        if piece.nodes:
            result.setdefault(k, []).append(piece)
    return result
