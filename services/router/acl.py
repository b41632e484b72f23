"""Namespace access: what a client key restricted to some namespaces may ask the router.

A restricted key (``keymem keys add-client NAME --namespaces a,b``) may call the ``memory``
service (``ping`` too: a front end waits for it) and the router's ``ping`` and ``version``,
nothing else: the model services and the
graph would let it reach around the memory service. Every namespace a ``memory`` request names
must match one of the key's patterns (a name, or a prefix ending in ``*``):

* ``namespace`` (omitted means ``default``, as everywhere) outside them is ``forbidden``;
* ``namespaces`` (recall and inject search several) keeps the allowed ones and is ``forbidden``
  only when none is left, so a team's hook that adds ``default`` still reads its own;
* each item of a batch is checked like a single write.

A request that names no namespace gets ``default`` written in, so a method whose omitted
namespace means "all of them" (``counts``) cannot count other teams'. By-id methods need no
more: the graph answers an id of another namespace ``not_found`` (docs/GRAPH.md).
"""

from __future__ import annotations

from typing import Any

from keymem.protocol import envelope
from keymem.protocol.codec import pack, unpack
from keymem.protocol.errors import BadRequest, Forbidden
from keymem.services.graph.text import normalize_namespace
from keymem.services.keys import PREFIX_WILDCARD, ClientEntry
from keymem.services.scope import DEFAULT_NAMESPACE

MEMORY_SERVICE = "memory"
ROUTER_SERVICE = "router"
PING = "ping"
OPEN_ROUTER_METHODS = frozenset({PING, "version"})


def confine(request: envelope.Request, entry: ClientEntry) -> envelope.Request:
    """``request`` as ``entry`` may send it (namespaces narrowed, ``default`` written in), or
    ``Forbidden``; unchanged for a key that may use every namespace."""
    patterns = entry.namespaces
    if patterns is None:
        return request
    if request.service == ROUTER_SERVICE and request.method in OPEN_ROUTER_METHODS:
        return request
    if request.service == MEMORY_SERVICE and request.method == PING:
        return request
    if request.service != MEMORY_SERVICE:
        raise Forbidden(f"client {entry.name!r} may call only the memory service")
    body = unpack(request.body)
    if not isinstance(body, dict):
        raise BadRequest("the body must be a map")
    confined = _confined(body, entry)
    return request if confined is body else request._replace(body=pack(confined))


def _confined(body: dict[str, Any], entry: ClientEntry) -> dict[str, Any]:
    names = body.get("namespaces")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("namespaces must be a list of namespace names")
        kept = [n for n in names if allows(entry, n)]
        if not kept:
            raise _forbidden(entry, ", ".join(names))
        if len(kept) < len(names):
            body = {**body, "namespaces": kept}
    elif body.get("namespace") is None:
        body = {**body, "namespace": DEFAULT_NAMESPACE}
    single = body.get("namespace")
    if single is not None:
        _check(entry, single)
    items = body.get("items")
    if isinstance(items, list):
        for item in items:
            _check(entry, item.get("namespace") if isinstance(item, dict) else None)
    return body


def _check(entry: ClientEntry, namespace: Any) -> None:
    if namespace is not None and not isinstance(namespace, str):
        raise BadRequest("namespace must be a string")
    if not allows(entry, namespace):
        raise _forbidden(entry, normalize_namespace(namespace))


def allows(entry: ClientEntry, namespace: str | None) -> bool:
    if entry.namespaces is None:
        return True
    name = normalize_namespace(namespace)
    return any(
        name.startswith(pattern[:-1]) if pattern.endswith(PREFIX_WILDCARD) else name == pattern
        for pattern in entry.namespaces
    )


def _forbidden(entry: ClientEntry, asked: str) -> Forbidden:
    allowed = ", ".join(entry.namespaces or ())
    return Forbidden(
        f"client {entry.name!r} may not use namespace {asked!r} (it may use: {allowed})",
        {"allowed": list(entry.namespaces or ())},
    )
