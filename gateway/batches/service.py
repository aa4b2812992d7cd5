"""What the Batch API routes ask: a file kept, a batch made, and the stores behind them::

    service = Batches(config.batches, database, max_body_bytes, clock.wall)
    record = await service.upload(request, tenant_id)      # FileRecord, or a 400/413
    batch = await service.create(body, tenant_id, key_id)  # BatchRecord (failed: its errors)
    await service.sweep()                                  # expired files removed

A batch is created whole: every line of its file is checked again against the batch's
``endpoint`` and the batch and its lines are written in one transaction (``in_progress``), or
the batch is written ``failed`` with the lines' errors (OpenAI's ``errors.data``) and no line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson
from starlette.requests import Request

from gateway.batches.config import BatchesConfig
from gateway.batches.files import FileRecord, FileStore
from gateway.batches.jobs import BatchRecord, JobStore, new_batch_id, new_file_id
from gateway.batches.lines import BATCH_ENDPOINTS, Bounds, InputLine, check_lines
from gateway.batches.upload import read_upload
from gateway.clock import Reading
from gateway.database.database import Database
from gateway.errors import InvalidParameter, NotFound, RateLimited

logger = logging.getLogger(__name__)

Json = dict[str, Any]
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_ERRORS = 100
"""Line errors a failed batch lists (the first ones): a bad file of 50 000 lines stays small."""
WINDOWS = ("24h",)


class Batches:
    def __init__(
        self,
        config: BatchesConfig,
        database: Database,
        max_body_bytes: int,
        clock: Reading = time.time,
    ) -> None:
        self.config = config
        self.files = FileStore(database)
        self.jobs = JobStore(database)
        self.clock = clock
        self.bounds = Bounds(
            config.max_file_bytes, config.max_lines, min(config.max_line_bytes, max_body_bytes)
        )
        self._sweeper: asyncio.Task[None] | None = None

    async def upload(self, request: Request, tenant_id: str) -> FileRecord:
        if await self.files.count(tenant_id, self.clock()) >= self.config.max_files_per_tenant:
            raise InvalidParameter(
                f"This tenant keeps {self.config.max_files_per_tenant} files already: delete "
                "some first.",
                param="file",
                code="too_many_files",
            )
        upload = await read_upload(request, self.bounds)
        now = self.clock()
        ttl = upload.expires_after or self.config.file_ttl_seconds
        record = FileRecord(
            id=new_file_id(),
            tenant_id=tenant_id,
            purpose=upload.purpose,
            filename=upload.filename,
            bytes=len(upload.content),
            lines=len(upload.checked.lines),
            created_at=now,
            expires_at=now + ttl,
        )
        await self.files.put(record, upload.content)
        return record

    async def create(self, body: Json, tenant_id: str, key_id: str | None) -> BatchRecord:
        file_id, endpoint, window, metadata = _parameters(body)
        now = self.clock()
        found = await self.files.get(file_id, tenant_id=tenant_id, now=now)
        content = await self.files.content(file_id, tenant_id=tenant_id, now=now)
        if found is None or content is None:
            raise NotFound(f"No such File object: {file_id}", param="input_file_id")
        if found.purpose != "batch":
            raise InvalidParameter(
                "The file's purpose must be batch.", param="input_file_id", code="invalid_file"
            )
        if await self.jobs.active(tenant_id) >= self.config.max_active_batches_per_tenant:
            raise RateLimited(
                f"This tenant has {self.config.max_active_batches_per_tenant} batches in "
                "progress already.",
                code="batch_limit_exceeded",
            )
        lines = check_lines([content], self.bounds).lines
        errors = _mismatched(lines, endpoint)
        model = _model(lines)
        record = BatchRecord(
            id=new_batch_id(),
            tenant_id=tenant_id,
            key_id=key_id,
            endpoint=endpoint,
            input_file_id=file_id,
            completion_window=window,
            status="failed" if errors else "in_progress",
            created_at=now,
            expires_at=now + self.config.completion_window_seconds,
            total=0 if errors else len(lines),
            completed=0,
            failed=0,
            metadata=metadata,
            errors=errors or None,
            model=model,
            stamps=(("failed", now),) if errors else (("in_progress", now),),
        )
        await self.jobs.create(record, () if errors else lines)
        return record

    # --- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def sweep(self) -> int:
        return await self.files.expire(now=self.clock())

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                logger.exception("expiring batch files failed; retrying next interval")
            await asyncio.sleep(60)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper


def _parameters(body: Json) -> tuple[str, str, str, Json | None]:
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str) or not 0 < len(file_id) <= 128:
        raise InvalidParameter("`input_file_id` must be a file id.", param="input_file_id")
    endpoint = body.get("endpoint")
    if endpoint not in BATCH_ENDPOINTS:
        raise InvalidParameter(
            f"`endpoint` must be one of {', '.join(sorted(BATCH_ENDPOINTS))}.", param="endpoint"
        )
    window = body.get("completion_window")
    if window not in WINDOWS:
        raise InvalidParameter("`completion_window` must be 24h.", param="completion_window")
    return file_id, str(endpoint), str(window), _metadata(body.get("metadata"))


def _metadata(metadata: object) -> Json | None:
    if metadata is None:
        return None
    if (
        not isinstance(metadata, dict)
        or len(metadata) > MAX_METADATA_KEYS
        or not all(
            isinstance(k, str)
            and len(k) <= MAX_METADATA_KEY_CHARS
            and isinstance(v, str)
            and len(v) <= MAX_METADATA_VALUE_CHARS
            for k, v in metadata.items()
        )
    ):
        raise InvalidParameter(
            f"`metadata` must be at most {MAX_METADATA_KEYS} string pairs, keys up to "
            f"{MAX_METADATA_KEY_CHARS} characters and values up to {MAX_METADATA_VALUE_CHARS}.",
            param="metadata",
        )
    return metadata


def _mismatched(lines: tuple[InputLine, ...], endpoint: str) -> list[Json]:
    errors = [
        {
            "code": "mismatched_endpoint",
            "message": f"The line's url {line.url} is not the batch's endpoint {endpoint}.",
            "param": "url",
            "line": line.number,
        }
        for line in lines
        if line.url != endpoint
    ]
    return errors[:MAX_ERRORS]


def _model(lines: tuple[InputLine, ...]) -> str | None:
    model = orjson.loads(lines[0].body).get("model") if lines else None
    return model[:256] if isinstance(model, str) else None
