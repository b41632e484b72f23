"""The page's JSON endpoints and its static files, as one Starlette app.

Reads go through the memory service's read-only methods (``recall``, ``search``,
``browse_keys``, ``read_key``, ``get_memories``, ``history``) and the graph's
``list_memories`` (the newest first, which the memory service does not expose): looking at a
memory in the page counts no access and teaches the graph nothing, unlike an agent's
``read_memory``. The four
changes (``confirm``, ``correct``, ``forget``, ``dismiss``) are POSTs the page sends only after
an explicit click, stamped with this server's provenance (``tool: ui.<change>``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from keymem.protocol.errors import BadRequest, KeymemError, NotFound
from keymem.services.mcp.provenance import Provenance
from keymem.services.ui.access import TokenGate
from keymem.services.ui.gateway import Gateway, error_response

STATIC = Path(__file__).parent / "static"
# The page loads nothing from elsewhere and cannot be framed (its buttons change memories).
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
# Host names a loopback page answers to; any other is a DNS-rebinding attempt.
LOOPBACK_HOSTS = ["127.0.0.1", "localhost"]
BROWSE_LIMIT = 100  # keys per page of the key list (browse_keys' maximum)
SEARCH_KEYS = 12  # key clusters a search shows
SEARCH_MEMORIES = 10  # memories a search shows
MEMORIES_PAGE = 50  # newest memories per page of the memory list
KEY_MEMORIES = 50  # memories per page under one key (read_key's maximum)
CONFIRM_EVIDENCE = "user"  # a person clicking "confirm" in the page


class Api:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.provenance = Provenance(uuid.uuid4().hex[:12])

    async def read(self, method: str, body: dict[str, Any], *, service: str = "memory") -> Any:
        return await self.gateway.read(method, body, service=service)

    async def views(
        self, namespace: str | None, found: list[tuple[str, dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """Full memory views (content, keys, validity) for ``found`` ids, in their order, each
        with its extra fields; an id forgotten meanwhile is left out."""
        if not found:
            return []
        reply = await self.read(
            "get_memories", with_namespace({"ids": [i for i, _ in found]}, namespace)
        )
        by_id = {m["id"]: m for m in reply["memories"]}
        return [{**by_id[i], **extra} for i, extra in found if i in by_id]

    async def overview(self, request: Request) -> JSONResponse:
        counts = await self.read("counts", {})
        return JSONResponse({"namespaces": counts["namespaces"]})

    async def keys(self, request: Request) -> JSONResponse:
        body = {
            "hubs_only": request.query_params.get("hubs") == "1",
            "limit": BROWSE_LIMIT,
            "offset": query_int(request, "offset", 0),
        }
        return JSONResponse(await self.read("browse_keys", with_namespace(body, ns(request))))

    async def newest(self, request: Request) -> JSONResponse:
        """The namespace's memories, newest first, a page at a time."""
        namespace = ns(request)
        body = {"limit": MEMORIES_PAGE, "offset": query_int(request, "offset", 0)}
        page = await self.read("list_memories", with_namespace(body, namespace), service="graph")
        return JSONResponse(
            {
                "namespace": page["namespace"],
                "total": page["total"],
                "next_offset": page["next_offset"],
                "memories": await self.views(namespace, [(m["id"], {}) for m in page["memories"]]),
            }
        )

    async def search(self, request: Request) -> JSONResponse:
        namespace = ns(request)
        query = request.query_params.get("q", "")
        recalled, searched = await asyncio.gather(
            self.read("recall", with_namespace({"query": query, "top_k": SEARCH_KEYS}, namespace)),
            self.read(
                "search", with_namespace({"query": query, "top_k": SEARCH_MEMORIES}, namespace)
            ),
        )
        hits = [
            (m["memory_id"], {"hop": m["components"]["hop"], "score": m["score"]})
            for m in searched["memories"]
        ]
        return JSONResponse(
            {
                "query": query,
                "keys": recalled["keys"],
                "nearest_keys": recalled.get("nearest_keys", []),
                "memories": await self.views(namespace, hits),
            }
        )

    async def key(self, request: Request) -> JSONResponse:
        namespace = ns(request)
        body = {
            "key_id": request.path_params["key_id"],
            "limit": KEY_MEMORIES,
            "offset": query_int(request, "offset", 0),
        }
        reply = await self.read("read_key", with_namespace(body, namespace))
        handles = [
            (h["memory_id"], {"via_link_weight": h["link_weight"]}) for h in reply["memories"]
        ]
        return JSONResponse(
            {
                "key": reply["key"],
                "total": reply["total"],
                "next_offset": reply["next_offset"],
                "memories": await self.views(namespace, handles),
            }
        )

    async def memory(self, request: Request) -> JSONResponse:
        namespace = ns(request)
        memory_id = request.path_params["memory_id"]
        body = {"ids": [memory_id], "include_inactive": True}
        found, history = await asyncio.gather(
            self.read("get_memories", with_namespace(body, namespace)),
            self.read("history", with_namespace({"memory_id": memory_id}, namespace)),
        )
        if not found["memories"]:
            raise NotFound(f"memory {memory_id} not found")
        return JSONResponse({"memory": found["memories"][0], "versions": history["versions"]})

    async def change(self, request: Request) -> JSONResponse:
        """One of the four changes, on the memory in the path."""
        action = request.path_params["action"]
        body = {"memory_id": request.path_params["memory_id"]}
        given = await json_body(request)
        if action == "confirm":
            body.update(evidence=CONFIRM_EVIDENCE, source=self.provenance.stamp("ui.confirm"))
            method = "confirm_memory"
        elif action == "correct":
            body.update(content=given.get("content"), source=self.provenance.stamp("ui.correct"))
            method = "correct"
        elif action == "dismiss":
            body.update(key_id=given.get("key_id"))
            method = "dismiss"
        elif action == "forget":
            method = "forget"
        else:
            raise NotFound(f"no change named {action!r} (confirm, correct, dismiss, forget)")
        return JSONResponse(await self.gateway.write(method, with_namespace(body, ns(request))))


def ns(request: Request) -> str | None:
    return request.query_params.get("ns") or None


def with_namespace(body: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    return body if namespace is None else {**body, "namespace": namespace}


def query_int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {raw!r}") from None


async def json_body(request: Request) -> dict[str, Any]:
    """The POST's JSON object (an empty body is an empty object)."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise BadRequest("the request body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


async def index(request: Request) -> FileResponse:
    return FileResponse(STATIC / "index.html", headers=PAGE_HEADERS)


def build_app(gateway: Gateway, token: str) -> Starlette:
    api = Api(gateway)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await gateway.close()

    routes = [
        Route("/", index),
        Route("/api/overview", api.overview),
        Route("/api/keys", api.keys),
        Route("/api/memories", api.newest),
        Route("/api/search", api.search),
        Route("/api/keys/{key_id}", api.key),
        Route("/api/memories/{memory_id}", api.memory),
        Route("/api/memories/{memory_id}/{action}", api.change, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS),
            Middleware(TokenGate, token=token),
        ],
        exception_handlers={KeymemError: error_response},
        lifespan=lifespan,
    )
