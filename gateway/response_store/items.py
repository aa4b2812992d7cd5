"""Input items as a stored response keeps them, and pages of them: small pure functions.

A stored item always has an ``id`` (a client's own when it sent a short one, else one made from
the gateway's request id) and a ``status``, as ``input_items.list`` returns them; a message's
string content becomes the API's content parts. Items stay valid input items, so a stored
conversation is translated again, unchanged, when a follow-up continues it::

    items = input_items("hello", request_id="ab12")        # [{"type": "message", "id": ...}]
    conversation(stored_items, response["output"])         # what a follow-up continues
    page(items, limit=20, order="desc", after=None)        # the API's list object
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.errors import InvalidParameter

Json = dict[str, Any]

MAX_ID_CHARS = 128
PAGE_LIMIT = 100
DEFAULT_PAGE = 20
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def input_items(new_input: object, request_id: str) -> list[Json]:
    """``input`` (a string or a list of items, already checked by the translation) as stored."""
    items = (
        [{"type": "message", "role": "user", "content": new_input}]
        if isinstance(new_input, str)
        else list(new_input)
        if isinstance(new_input, list)
        else []
    )
    return [stored_item(item, f"{request_id}i{i:03d}") for i, item in enumerate(items)]


def stored_item(item: object, suffix: str) -> Json:
    if not isinstance(item, dict):
        return {"type": "unknown", "id": f"item_{suffix}"}  # translation refused these already
    kind = str(item.get("type", "message"))
    own = item.get("id")
    item_id = own if isinstance(own, str) and 0 < len(own) <= MAX_ID_CHARS else None
    stored: Json = {
        **item,
        "type": kind,
        "id": item_id or f"{_ID_PREFIX.get(kind, 'item')}_{suffix}",
    }
    if kind == "message":
        stored["content"] = _parts(item.get("role"), item.get("content"))
    if kind in _ID_PREFIX:
        stored["status"] = item.get("status") or "completed"
    return stored


def _parts(role: object, content: object) -> object:
    if not isinstance(content, str):
        return content
    if role == "assistant":
        return [{"type": "output_text", "text": content, "annotations": []}]
    return [{"type": "input_text", "text": content}]


def conversation(items: Sequence[Json], output: object) -> list[Json]:
    """What a follow-up continues: the response's own conversation, then its output."""
    return [
        *items,
        *(o for o in (output if isinstance(output, list) else ()) if isinstance(o, dict)),
    ]


def page(
    items: Sequence[Json], *, limit: int, order: str, after: str | None, before: str | None = None
) -> Json:
    """The API's list object: ``order`` desc (the default) is the newest item first; ``after``
    and ``before`` are item ids of that order."""
    ordered = list(reversed(items)) if order == "desc" else list(items)
    start, end = 0, len(ordered)
    if after is not None:
        start = _index(ordered, after, "after") + 1
    if before is not None:
        end = _index(ordered, before, "before")
    window = ordered[start:end]
    data = window[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(window) > limit,
    }


def _index(items: Sequence[Mapping[str, Any]], item_id: str, param: str) -> int:
    for index, item in enumerate(items):
        if item.get("id") == item_id:
            return index
    raise InvalidParameter(
        f"No input item `{item_id[:MAX_ID_CHARS]}` in this response.", param=param
    )
