"""``POST /v1/files``'s body: multipart form data, read as it arrives and bounded.

The body is read through a counter that refuses more than the file bound (413: a body that never
ends costs at most that); the form may have only ``file`` and the small fields OpenAI defines
(``purpose``, ``expires_after[...]``); the file part is spooled by Starlette's parser (memory up
to 1 MiB, then a temporary file) and checked line by line as it is read back. Nothing is stored
until every line passed::

    upload = await read_upload(request, bounds)     # Upload(filename, purpose, checked, content)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect, Request

from gateway.batches.lines import Bounds, CheckedFile, LineChecker
from gateway.errors import BodyTooLarge, InvalidParameter, InvalidRequest, UnsupportedMediaType
from gateway.values import value

FORM_OVERHEAD = 64 * 1024
"""Bytes of a form beyond its file's own: boundaries, part headers, the small fields."""
MAX_FILENAME_CHARS = 255
READ_CHUNK = 256 * 1024


@value
class Upload:
    filename: str
    purpose: str
    checked: CheckedFile
    content: bytes
    expires_after: int | None


async def read_upload(request: Request, bounds: Bounds) -> Upload:
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise UnsupportedMediaType("Upload a file as multipart/form-data.")
    parser = MultiPartParser(
        request.headers,
        _bounded(request, bounds.max_bytes + FORM_OVERHEAD),
        max_files=1,
        max_fields=4,
        max_part_size=1024,
    )
    try:
        form = await parser.parse()
    except MultiPartException as err:
        raise InvalidRequest(f"The form could not be read: {err.message}") from None
    except ClientDisconnect:
        raise InvalidRequest("The upload ended before its body did.") from None
    try:
        purpose = form.get("purpose")
        if purpose != "batch":
            raise InvalidParameter(
                "This gateway stores files with `purpose` batch only.", param="purpose"
            )
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidParameter("The form needs a `file` part.", param="file")
        checked, content = await _checked(upload, bounds)
        filename = (upload.filename or "upload.jsonl")[:MAX_FILENAME_CHARS]
        return Upload(filename, purpose, checked, content, _expires_after(form))
    finally:
        await form.close()


async def _checked(upload: UploadFile, bounds: Bounds) -> tuple[CheckedFile, bytes]:
    checker = LineChecker(bounds)
    parts: list[bytes] = []
    while chunk := await upload.read(READ_CHUNK):
        checker.feed(chunk)
        parts.append(chunk)
    checked = checker.finish()
    content = b"".join(parts)
    try:
        content.decode()
    except UnicodeDecodeError:
        raise InvalidParameter("The file is not UTF-8.", param="file") from None
    return checked, content


def _expires_after(form: FormData) -> int | None:
    """``expires_after[seconds]`` (anchor ``created_at``), 3600 to 2592000 as OpenAI bounds it."""
    raw = form.get("expires_after[seconds]")
    if raw is None:
        return None
    try:
        seconds = int(str(raw))
    except ValueError:
        seconds = 0
    if not 3600 <= seconds <= 2_592_000:
        raise InvalidParameter(
            "`expires_after.seconds` must be from 3600 to 2592000.", param="expires_after"
        )
    return seconds


async def _bounded(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"The upload is larger than the limit of {limit} bytes.")
        yield chunk
