"""Comparison rows and their outputs: a CSV table and an SVG graph coloured by status."""

from __future__ import annotations

import csv
import html
import math
from dataclasses import asdict, dataclass, fields
from typing import Dict, List, Optional, Sequence

import torch

PASS, FAIL, NOT_COMPARED = "pass", "fail", "not compared"
_FILL = {PASS: "#8fd694", FAIL: "#f28b82", NOT_COMPARED: "#e0e0e0"}
_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _MARGIN = 240, 46, 24, 34, 20


@dataclass
class ComparisonRow:
    """One compared (or not compared) output of one edge node."""

    node: str
    op: str
    target: str
    debug_handle: Optional[int]
    output_index: int
    tensor_name: str = ""
    scale: Optional[float] = None
    zero_point: Optional[int] = None
    metric: str = ""
    value: Optional[float] = None
    threshold: Optional[float] = None
    status: str = NOT_COMPARED
    reason: str = ""


def _status_of_node(rows: Sequence[ComparisonRow]) -> str:
    statuses = {r.status for r in rows}
    return FAIL if FAIL in statuses else PASS if PASS in statuses else NOT_COMPARED


def write_csv(rows: Sequence[ComparisonRow], path: str) -> None:
    """One line per row, columns = ComparisonRow fields."""
    names = [f.name for f in fields(ComparisonRow)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in asdict(row).items()})


def _levels(graph: torch.fx.Graph, drawn: Dict[str, torch.fx.Node]) -> Dict[str, int]:
    """Longest-path depth of every drawn node (inputs at 0), in topological order."""
    level: Dict[str, int] = {}
    for node in graph.nodes:
        if node.name not in drawn:
            continue
        parents = [level[p.name] for p in node.all_input_nodes if p.name in level]
        level[node.name] = 1 + max(parents) if parents else 0
    return level


def _positions(level: Dict[str, int]) -> Dict[str, tuple]:
    per_row: Dict[int, int] = {}
    pos = {}
    for name, lv in level.items():
        col = per_row.get(lv, 0)
        per_row[lv] = col + 1
        pos[name] = (_MARGIN + col * (_BOX_W + _GAP_X), _MARGIN + lv * (_BOX_H + _GAP_Y))
    return pos


def _label(rows: Sequence[ComparisonRow]) -> str:
    compared = [r for r in rows if r.value is not None]
    if not compared:
        return rows[0].reason if rows and rows[0].reason else ""
    worst = compared[0] if len(compared) == 1 else next((r for r in compared if r.status == FAIL), compared[0])
    value = "inf" if math.isinf(worst.value) else f"{worst.value:.4g}"
    return f"{worst.metric}={value}"


def _box(name: str, node: torch.fx.Node, rows: Sequence[ComparisonRow], xy: tuple) -> str:
    x, y = xy
    status = _status_of_node(rows) if rows else NOT_COMPARED
    handle = rows[0].debug_handle if rows else None
    title = html.escape(
        f"{name} ({node.op} {node.target}) handle={handle} status={status} "
        + "; ".join(f"out{r.output_index}: {r.metric}={r.value} {r.status} {r.reason}" for r in rows)
    )
    line1 = html.escape(name[:34])
    line2 = html.escape((f"#{handle} " if handle else "") + _label(rows))[:40]
    return (
        f'<g><title>{title}</title><rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" '
        f'fill="{_FILL[status]}" stroke="#555"/>'
        f'<text x="{x + 8}" y="{y + 18}" font-size="12" font-family="monospace">{line1}</text>'
        f'<text x="{x + 8}" y="{y + 36}" font-size="11" font-family="monospace">{line2}</text></g>'
    )


def _edges(drawn: Dict[str, torch.fx.Node], pos: Dict[str, tuple]) -> List[str]:
    lines = []
    for name, node in drawn.items():
        for parent in node.all_input_nodes:
            if parent.name in pos:
                (x1, y1), (x2, y2) = pos[parent.name], pos[name]
                lines.append(
                    f'<line x1="{x1 + _BOX_W // 2}" y1="{y1 + _BOX_H}" x2="{x2 + _BOX_W // 2}" '
                    f'y2="{y2}" stroke="#888" stroke-width="1.2" marker-end="url(#arrow)"/>'
                )
    return lines


def _legend(width: int) -> str:
    items = [
        f'<rect x="{width - 150}" y="{8 + 18 * i}" width="12" height="12" fill="{_FILL[s]}" stroke="#555"/>'
        f'<text x="{width - 132}" y="{18 + 18 * i}" font-size="12" font-family="sans-serif">{s}</text>'
        for i, s in enumerate((PASS, FAIL, NOT_COMPARED))
    ]
    return "".join(items)


def write_svg(
    graph: torch.fx.Graph, drawn_names: Sequence[str], rows: Sequence[ComparisonRow], path: str, title: str = ""
) -> None:
    """The edge graph (drawn nodes and their edges), each node filled by its status."""
    drawn = {n.name: n for n in graph.nodes if n.name in set(drawn_names)}
    pos = _positions(_levels(graph, drawn))
    rows_by_node: Dict[str, List[ComparisonRow]] = {}
    for row in rows:
        rows_by_node.setdefault(row.node, []).append(row)
    width = max((x for x, _ in pos.values()), default=0) + _BOX_W + _MARGIN + 160
    height = max((y for _, y in pos.values()), default=0) + _BOX_H + 2 * _MARGIN + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
        '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#888"/></marker></defs>',
        f'<text x="{_MARGIN}" y="14" font-size="13" font-family="sans-serif">{html.escape(title)}</text>',
        _legend(width),
    ]
    parts += _edges(drawn, pos)
    parts += [_box(name, node, rows_by_node.get(name, []), pos[name]) for name, node in drawn.items()]
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))
