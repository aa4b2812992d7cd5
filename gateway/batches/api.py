"""The Files and Batch API routes, as the official SDK calls them::

    POST   /v1/files                      client.files.create(file=..., purpose="batch")
    GET    /v1/files                      client.files.list(limit=, order=, after=, purpose=)
    GET    /v1/files/{file_id}            client.files.retrieve(id)
    GET    /v1/files/{file_id}/content    client.files.content(id)
    DELETE /v1/files/{file_id}            client.files.delete(id)
    POST   /v1/batches                    client.batches.create(input_file_id=, endpoint=,
                                              completion_window="24h", metadata=)
    GET    /v1/batches                    client.batches.list(limit=, after=)
    GET    /v1/batches/{batch_id}         client.batches.retrieve(id)
    POST   /v1/batches/{batch_id}/cancel  client.batches.cancel(id)

Files and batches belong to the tenant of the key that made them: any other tenant's key gets
the 404 an id that does not exist gets.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.batches.service import Batches
from gateway.errors import InvalidJSON, InvalidParameter, NotFound
from gateway.wire.outcome import PRINCIPAL_KEY

JSON = "application/json"
MAX_ID_CHARS = 128
MAX_BATCH_BODY = 64 * 1024
FILES_PAGE_LIMIT = 10_000
BATCHES_PAGE_LIMIT = 100


class BatchApi:
    def __init__(self, service: Batches) -> None:
        self.service = service

    # --- files ------------------------------------------------------------------------------

    async def files(self, request: Request) -> Response:
        if request.method == "POST":
            record = await self.service.upload(request, _tenant(request))
            return _json(record.to_json())
        params = request.query_params
        order = params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidParameter("`order` must be asc or desc.", param="order")
        records, more = await self.service.files.page(
            tenant_id=_tenant(request),
            now=self.service.clock(),
            limit=_limit(params.get("limit"), FILES_PAGE_LIMIT, FILES_PAGE_LIMIT),
            after=_cursor(params.get("after")),
            order=order,
            purpose=_cursor(params.get("purpose")),
        )
        return _json(_listing([r.to_json() for r in records], more))

    async def file(self, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        tenant = _tenant(request)
        if request.method == "DELETE":
            deleted = len(file_id) <= MAX_ID_CHARS and await self.service.files.delete(
                file_id, tenant_id=tenant
            )
            if not deleted:
                raise _no_file(file_id)
            return _json({"id": file_id, "object": "file", "deleted": True})
        record = None
        if len(file_id) <= MAX_ID_CHARS:
            record = await self.service.files.get(
                file_id, tenant_id=tenant, now=self.service.clock()
            )
        if record is None:
            raise _no_file(file_id)
        return _json(record.to_json())

    async def content(self, request: Request) -> Response:
        file_id = request.path_params["file_id"]
        content = None
        if len(file_id) <= MAX_ID_CHARS:
            content = await self.service.files.content(
                file_id, tenant_id=_tenant(request), now=self.service.clock()
            )
        if content is None:
            raise _no_file(file_id)
        return Response(content, media_type="application/jsonl")

    # --- batches ----------------------------------------------------------------------------

    async def batches(self, request: Request) -> Response:
        if request.method == "POST":
            body = await _body(request)
            record = await self.service.create(body, _tenant(request), _key(request))
            return _json(record.to_json())
        params = request.query_params
        records, more = await self.service.jobs.page(
            tenant_id=_tenant(request),
            limit=_limit(params.get("limit"), 20, BATCHES_PAGE_LIMIT),
            after=_cursor(params.get("after")),
        )
        return _json(_listing([r.to_json() for r in records], more))

    async def batch(self, request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        record = None
        if len(batch_id) <= MAX_ID_CHARS:
            record = await self.service.jobs.get(batch_id, tenant_id=_tenant(request))
        if record is None:
            raise _no_batch(batch_id)
        return _json(record.to_json())

    async def cancel(self, request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        record = None
        if len(batch_id) <= MAX_ID_CHARS:
            record = await self.service.jobs.cancel(
                batch_id, tenant_id=_tenant(request), now=self.service.clock()
            )
        if record is None:
            raise _no_batch(batch_id)
        return _json(record.to_json())


def batch_routes(service: Batches | None) -> list[BaseRoute]:
    """The routes (none when ``batches.enabled`` is off: they answer 404 like any unknown path)."""
    if service is None:
        return []
    api = BatchApi(service)
    return [
        Route("/v1/files", api.files, methods=["GET", "POST"]),
        Route("/v1/files/{file_id}", api.file, methods=["GET", "DELETE"]),
        Route("/v1/files/{file_id}/content", api.content, methods=["GET"]),
        Route("/v1/batches", api.batches, methods=["GET", "POST"]),
        Route("/v1/batches/{batch_id}", api.batch, methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", api.cancel, methods=["POST"]),
    ]


def _json(body: object) -> Response:
    return Response(orjson.dumps(body), media_type=JSON)


def _listing(data: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    """OpenAI's list object. An empty list's ``first_id`` and ``last_id`` are null (as OpenAI
    answers; its document types them as strings, required in ``ListFilesResponse``)."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": more,
    }


async def _body(request: Request) -> dict[str, Any]:
    size = 0
    parts: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BATCH_BODY:
            raise InvalidParameter(f"The request body is larger than {MAX_BATCH_BODY} bytes.")
        parts.append(chunk)
    try:
        body = orjson.loads(b"".join(parts))
    except orjson.JSONDecodeError:
        raise InvalidJSON("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise InvalidJSON("The request body must be a JSON object.")
    return body


def _tenant(request: Request) -> str:
    principal = request.scope.get(PRINCIPAL_KEY)
    return "" if principal is None else str(principal.tenant_id)


def _key(request: Request) -> str | None:
    principal = request.scope.get(PRINCIPAL_KEY)
    return None if principal is None else str(principal.key_id)


def _cursor(value: str | None) -> str | None:
    if value is not None and len(value) > MAX_ID_CHARS:
        raise InvalidParameter(f"At most {MAX_ID_CHARS} characters.", param="after")
    return value


def _limit(value: str | None, default: int, most: int) -> int:
    if value is None:
        return default
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise InvalidParameter(f"`limit` must be an integer from 1 to {most}.", param="limit")
    return limit


def _no_file(file_id: str) -> NotFound:
    return NotFound(f"No such File object: {file_id[:MAX_ID_CHARS]}", param="id")


def _no_batch(batch_id: str) -> NotFound:
    return NotFound(f"No batch found with id '{batch_id[:MAX_ID_CHARS]}'.", param="batch_id")
