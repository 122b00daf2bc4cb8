"""Groups from the module scopes the exporter wrote: the hierarchy a user recognises
(encoder > layer.0 > attention > self > query), as Model Explorer shows it.

torch's TorchScript exporter writes the scope into the name
(``/encoder/layer.0/attention/self/query/MatMul``: every part but the last); its dynamo
exporter names nodes ``node_MatMul_12`` and writes the modules into the node's metadata,
which the analysis keeps as ``scope`` (``engine.graph.ir.module_scope``). When most nodes
carry a scope the view's groups are those scopes; otherwise ``groups.find_groups`` cuts the
graph by its detected structure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from frontend.figures.graph.groups import Group

SCOPED_SHARE = 0.5  # names carry scopes when at least this share of the nodes has one


def node_scope(node: dict) -> tuple[str, ...]:
    """The node's module path: the analysis's ``scope``, else the parts of a name written
    like a path (``/a/b/Op`` or ``a/b/Op``) but its last."""
    scope = node.get("scope")
    if scope:
        return tuple(scope)
    name = node["name"]
    if "/" not in name:
        return ()
    return tuple(part for part in name.split("/")[:-1] if part)


def scope_groups(nodes: Sequence[dict], owner: Mapping[int, int]) -> list[Group] | None:
    """Nested groups, one per scope (parents before children, members ascending), or
    None when the names carry no scopes. A weight producer goes with its consumer; a
    scope holding exactly what its only sub-scope holds is one group (``model/encoder``);
    a scope of one node is no group (its node sits in the scope around it)."""
    n = len(nodes)
    paths: list[tuple[str, ...]] = [()] * n
    main = 0
    scoped = 0
    for v, node in enumerate(nodes):
        if v in owner:
            continue
        main += 1
        paths[v] = node_scope(node)
        scoped += bool(paths[v])
    if scoped < 2 or scoped < SCOPED_SHARE * main:
        return None
    for satellite, consumer in owner.items():
        paths[satellite] = paths[consumer]

    # The scope tree: every prefix of a path, with the nodes under it.
    members: dict[tuple[str, ...], list[int]] = {}
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for v, path in enumerate(paths):
        for depth in range(1, len(path) + 1):
            prefix = path[:depth]
            found = members.get(prefix)
            if found is None:
                members[prefix] = found = []
                children.setdefault(path[: depth - 1], []).append(prefix)
            found.append(v)

    groups: list[Group] = []
    total = n

    def add(scope: tuple[str, ...], parent: int, parent_size: int, label: list[str]) -> None:
        inside = members[scope]
        kids = children.get(scope, [])
        if len(inside) == parent_size:  # the nodes of the group around it: no group
            for kid in kids:
                add(kid, parent, parent_size, label)
            return
        label = [*label, scope[-1]]
        if len(inside) < 2:  # one node: it sits in the group around it
            return
        if len(kids) == 1 and len(members[kids[0]]) == len(inside):
            add(kids[0], parent, parent_size, label)  # one group, both names
            return
        g = len(groups)
        groups.append(Group("scope", parent, inside, "/".join(label)))
        for kid in sorted(kids, key=lambda k: members[k][0]):
            add(kid, g, len(inside), [])

    for top in sorted(children.get((), []), key=lambda k: members[k][0]):
        add(top, -1, total, [])
    return groups
