"""The stored responses' routes, as the official SDK calls them::

    GET    /v1/responses/{response_id}                  client.responses.retrieve(id)
    DELETE /v1/responses/{response_id}                  client.responses.delete(id)
    GET    /v1/responses/{response_id}/input_items      client.responses.input_items.list(id,
                                                            limit=, order=, after=, before=)
    DELETE /admin/tenants/{tenant}/responses            every stored response of a tenant
                                                        (admin keys)

A response belongs to the tenant of the key that made it: any other tenant's key gets the 404
a response that does not exist gets.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.errors import InvalidParameter, NotFound
from gateway.response_store.items import DEFAULT_PAGE, MAX_ID_CHARS, PAGE_LIMIT, page
from gateway.response_store.service import ANONYMOUS, StoredResponses
from gateway.response_store.store import StoredResponse
from gateway.wire.outcome import PRINCIPAL_KEY

JSON = "application/json"


class ResponsesApi:
    def __init__(self, service: StoredResponses) -> None:
        self.service = service

    async def resource(self, request: Request) -> Response:
        """``GET`` or ``DELETE`` of one stored response (the route admits only these two)."""
        if request.method == "DELETE":
            return await self.delete(request)
        return await self.retrieve(request)

    async def retrieve(self, request: Request) -> Response:
        if request.query_params.get("stream") in ("true", "True", "1"):
            raise InvalidParameter(
                "Streaming a stored response again is not supported by this gateway.",
                param="stream",
                code="unsupported_value",
            )
        record = await self._found(request)
        return Response(record.response, media_type=JSON)

    async def delete(self, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        deleted = len(response_id) <= MAX_ID_CHARS and await self.service.store.delete(
            response_id, tenant_id=_tenant(request)
        )
        if not deleted:
            raise _not_found(response_id)
        body = {"id": response_id, "object": "response.deleted", "deleted": True}
        return Response(orjson.dumps(body), media_type=JSON)

    async def input_items(self, request: Request) -> Response:
        params = request.query_params
        limit = _limit(params.get("limit"))
        order = params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidParameter("`order` must be asc or desc.", param="order")
        record = await self._found(request)
        listing = page(
            record.items_json(),
            limit=limit,
            order=order,
            after=params.get("after"),
            before=params.get("before"),
        )
        return Response(orjson.dumps(listing), media_type=JSON)

    async def purge(self, request: Request) -> Response:
        tenant_id = request.path_params["tenant"]
        deleted = await self.service.store.purge_tenant(tenant_id)
        body = {"object": "tenant.responses.deleted", "tenant_id": tenant_id, "deleted": deleted}
        return Response(orjson.dumps(body), media_type=JSON)

    async def _found(self, request: Request) -> StoredResponse:
        response_id = request.path_params["response_id"]
        record = await self.service.get(response_id, _tenant(request))
        if record is None:
            raise _not_found(response_id)
        return record


def responses_routes(service: StoredResponses, *, admin: bool) -> list[BaseRoute]:
    """The tenant routes always (a gateway without stored responses answers them 404); the
    purge only where admin keys guard ``/admin/``. Before the ``/admin`` mount."""
    api = ResponsesApi(service)
    routes: list[BaseRoute] = [
        # One route for both methods, so a 405 (OPTIONS, PUT...) lists both in its Allow header.
        Route("/v1/responses/{response_id}", api.resource, methods=["GET", "DELETE"]),
        Route("/v1/responses/{response_id}/input_items", api.input_items, methods=["GET"]),
    ]
    if admin:
        routes.append(Route("/admin/tenants/{tenant}/responses", api.purge, methods=["DELETE"]))
    return routes


def _tenant(request: Request) -> str:
    principal = request.scope.get(PRINCIPAL_KEY)
    return ANONYMOUS if principal is None else str(principal.tenant_id)


def _not_found(response_id: str) -> NotFound:
    shown = response_id[:MAX_ID_CHARS]
    return NotFound(f"Response with id '{shown}' not found.", param="response_id")


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_PAGE
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= PAGE_LIMIT:
        raise InvalidParameter(f"`limit` must be an integer from 1 to {PAGE_LIMIT}.", param="limit")
    return limit
