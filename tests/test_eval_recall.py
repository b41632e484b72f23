"""The eval's side of keymem's recall: a build without a method is reported, not crashed on."""

from __future__ import annotations

from typing import Any

import pytest

from keymem.protocol.errors import InternalError
from keymem.protocol.worker import Service
from keymem.services.evaluation.recall import (
    MethodUnavailable,
    memory_ids,
    offered_methods,
    require,
)
from keymem.services.stack import InprocStack


def memory_service(*methods: str) -> Service:
    service = Service("memory")
    for name in methods:

        def handler(body: Any, name: str = name) -> Any:
            return {"memories": [], "method": name}

        service.add(name, handler)
    return service


def test_a_missing_search_method_is_a_typed_unavailable(stack: InprocStack) -> None:
    stack.add_worker(memory_service("remember_batch"))
    client = stack.client()
    assert "remember_batch" in offered_methods(client)
    with pytest.raises(MethodUnavailable, match=r"memory\.search is not available"):
        require(client, "search")


def test_an_offered_method_passes(stack: InprocStack) -> None:
    stack.add_worker(memory_service("remember_batch", "search", "inject"))
    client = stack.client()
    require(client, "search")
    require(client, "inject")


def test_reply_ids_in_rank_order_under_either_field_name() -> None:
    reply = {"memories": [{"id": "a", "score": 0.9}, {"memory_id": "b"}, {"id": "c"}]}
    assert memory_ids(reply) == ["a", "b", "c"]
    assert memory_ids({"memories": []}) == []


@pytest.mark.parametrize("reply", [None, {}, {"memories": "a"}, {"memories": [{"content": "x"}]}])
def test_malformed_replies_are_typed_errors(reply: Any) -> None:
    with pytest.raises(InternalError):
        memory_ids(reply)
