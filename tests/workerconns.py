"""Client connections served by a chosen worker of a multi-worker gateway, proven in ``/proc``.

The workers of ``pd-gateway run`` with ``server.workers: N`` all accept on one listening socket,
so which one serves a connection is the kernel's choice. A test that must know makes the choice
itself: it opens the connection while every other worker is paused (SIGSTOP), so only the chosen
one can accept it, then reads in ``/proc`` which process holds the accepted socket::

    workers = worker_pids(gateway)                  # the children that hold the listening socket
    conns = connect_through(gateway, workers[0], workers[1:], count=10)
    accepted_by(workers[0], gateway.port)           # the client ports that worker holds

Linux only. A paused worker is resumed before this returns, whatever happens; keep the pause
short, under uvicorn's worker health check (5 s), or the supervisor replaces the worker.
"""

from __future__ import annotations

import os
import signal
import time
from http.client import HTTPConnection
from pathlib import Path

from serve_app.procs import descendants
from tests.gatewayproc import GatewayProcess

LISTEN, ESTABLISHED = "0A", "01"  # socket states in /proc/net/tcp


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1], 16)


def _tcp_sockets() -> list[tuple[int, int, str, int]]:
    """IPv4 TCP sockets: (local port, remote port, state, inode)."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        found.append((_port(fields[1]), _port(fields[2]), fields[3], int(fields[9])))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def worker_pids(gateway: GatewayProcess, count: int, timeout: float = 30) -> list[int]:
    """The ``count`` processes under the gateway's that hold its listening socket (the parent,
    which also holds it, is not one of them)."""
    deadline = time.monotonic() + timeout
    while True:
        listening = {
            i for port, _, st, i in _tcp_sockets() if port == gateway.port and st == LISTEN
        }
        found = sorted(
            pid for pid, _ in descendants(gateway.proc.pid) if _socket_inodes(pid) & listening
        )
        if len(found) == count:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(found)} workers hold the listening socket, wanted {count}")
        time.sleep(0.05)


def accepted_by(pid: int, port: int) -> set[int]:
    """The client ports of the connections to ``port`` that process ``pid`` has accepted."""
    mine = _socket_inodes(pid)
    return {
        remote
        for local, remote, state, inode in _tcp_sockets()
        if local == port and state == ESTABLISHED and inode in mine
    }


def connect_through(
    gateway: GatewayProcess, worker: int, others: list[int], count: int, timeout: float = 4
) -> list[HTTPConnection]:
    """``count`` open connections, each accepted by ``worker``: the others are paused meanwhile."""
    for pid in others:
        os.kill(pid, signal.SIGSTOP)
    try:
        conns = [HTTPConnection("127.0.0.1", gateway.port, timeout=30) for _ in range(count)]
        for conn in conns:
            conn.connect()
        ports = {conn.sock.getsockname()[1] for conn in conns}
        deadline = time.monotonic() + timeout
        while not ports <= accepted_by(worker, gateway.port):
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {worker} did not accept {count} connections")
            time.sleep(0.01)
    finally:
        for pid in others:
            os.kill(pid, signal.SIGCONT)
    return conns
