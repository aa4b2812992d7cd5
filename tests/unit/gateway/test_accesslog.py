import asyncio
import os

import orjson

from gateway.accesslog import AccessLog


def _read_all(fd: int) -> list[dict[str, object]]:
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 1 << 20)
    except BlockingIOError:
        return []
    return [orjson.loads(line) for line in data.splitlines()]


async def test_lines_are_batched_then_written_together() -> None:
    read_fd, write_fd = os.pipe()
    log = AccessLog(write_fd, interval=0.02)
    log.write({"request_id": "a", "status": 200})
    log.write({"request_id": "b", "status": 404})
    assert _read_all(read_fd) == []  # nothing written on the request's path
    await asyncio.sleep(0.05)
    entries = _read_all(read_fd)
    assert [(e["request_id"], e["status"], e["logger"]) for e in entries] == [
        ("a", 200, "gateway.access"),
        ("b", 404, "gateway.access"),
    ]
    os.close(read_fd)
    os.close(write_fd)


async def test_close_writes_what_is_pending() -> None:
    read_fd, write_fd = os.pipe()
    log = AccessLog(write_fd, interval=60)
    log.write({"request_id": "last"})
    log.close()
    assert [e["request_id"] for e in _read_all(read_fd)] == ["last"]
    os.close(read_fd)
    os.close(write_fd)


def test_without_a_loop_it_writes_at_once() -> None:
    read_fd, write_fd = os.pipe()
    AccessLog(write_fd).write({"request_id": "sync"})
    assert [e["request_id"] for e in _read_all(read_fd)] == ["sync"]
    os.close(read_fd)
    os.close(write_fd)
