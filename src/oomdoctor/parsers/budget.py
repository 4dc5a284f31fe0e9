"""Parsers with budgets: JSON and YAML from strangers cannot make oomdoctor work without end.

A 684-byte YAML document with nested aliases ("billion laughs") stands for billions of nodes: the
loader shares them, but everything that walks the result (redaction, audit, the bundle writer)
expands them. So every YAML document is composed first, its size *with aliases expanded* and its
depth are measured on the node graph (linear in the text: each node is visited once), and a
document over budget is refused before anything is constructed from it. JSON gets a depth cap.
Over-budget input raises BudgetError (a ValueError), which callers report as one line, exit 2.
"""

from __future__ import annotations

import json
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.nodes import MappingNode, Node, SequenceNode

MAX_YAML_NODES = 200_000  # per document, aliases expanded; a large Helm output is a few thousand
MAX_DEPTH = 100  # YAML and JSON nesting; real manifests and reports stay under 20


class BudgetError(ValueError):
    """The input is over a parser budget (too many expanded nodes, too deep, an alias cycle)."""


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_node_budget(root: Node, max_nodes: int = MAX_YAML_NODES, max_depth: int = MAX_DEPTH) -> None:
    """Raise BudgetError when `root` expands to more than `max_nodes` nodes or `max_depth` levels."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[key] > max_nodes:
                raise BudgetError(f"YAML document expands to more than {max_nodes} nodes (aliases of aliases?)")
            if depth[key] > max_depth:
                raise BudgetError(f"YAML nested deeper than {max_depth} levels")
            continue
        if key in size:
            continue
        if key in on_path:
            raise BudgetError("YAML alias refers to itself (a cycle)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


class BudgetComposer(Composer):
    """ruamel's composer, checking each document's expanded size before it is constructed."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None:
            check_node_budget(node)
        return node


def budget_yaml(typ: str = "safe") -> YAML:
    """A ruamel YAML loader (safe or round-trip, pure Python) that refuses over-budget documents."""
    y = YAML(typ=typ, pure=True)
    y.Composer = BudgetComposer
    y.max_depth = MAX_DEPTH  # the composer recurses per level: stop before Python's recursion limit
    return y


def json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    best, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            items = item.values()
        elif isinstance(item, list):
            items = item
        else:
            continue
        best = max(best, level)
        stack.extend((v, level + 1) for v in items if isinstance(v, (dict, list)))
    return best


def loads_json(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads with a nesting cap; BudgetError (a ValueError) when deeper."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise BudgetError(f"JSON nested deeper than {max_depth} levels") from None
    if isinstance(data, (dict, list)) and json_depth(data) > max_depth:
        raise BudgetError(f"JSON nested deeper than {max_depth} levels")
    return data
