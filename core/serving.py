"""The web process's gunicorn worker: uvicorn's, with new connections going to the worker
that holds the fewest.

gunicorn's workers share one listening socket. uvicorn hands it to the event loop's own
server, which on each wake-up accepts until the queue is empty (uvloop's libuv and
asyncio alike), so whichever worker wakes first takes a whole burst of connections and
keeps them for as long as their clients keep them alive: a client pool that opened 16
connections at once found 13 on one worker and 3 on the other, one core queueing while
the other idled (docs/benchmarks.md, "What sets a search's p99 at 16 connections").
Taking one connection per turn of the loop, as nginx does by default, was not enough:
an idle worker turns its loop in microseconds and took all 16 before the other was
scheduled (18 rounds of 20, on 2 busy cores).

So each worker publishes how many connections it holds in memory the workers share (made
by gunicorn's master before it forks them), and every worker is woken by a new
connection. A worker that holds more than another living worker leaves the connection to
it for DEFER seconds, and takes it itself if it is still waiting then: a worker that is
stuck or slow to be scheduled delays a connection by DEFER at most, never refuses it.

    gunicorn config.asgi -k core.serving.UvicornWorker -w 3
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import socket
import sys
import weakref
from multiprocessing.sharedctypes import RawArray

from gunicorn.arbiter import Arbiter
from uvicorn.server import Server, ServerState
from uvicorn_worker import UvicornWorker as _UvicornWorker

log = logging.getLogger(__name__)

DEFER = 0.005  # seconds a worker leaves a connection to a less busy one
ACCEPT_RETRY_SECONDS = 1.0  # after accept(2) failed for want of descriptors or buffers
SLOTS = 64  # workers that take part; any beyond (gunicorn -w 65) accept as they are woken

# One slot per worker, shared by fork: the worker's pid (0: none) and its open connections.
_pids = RawArray(ctypes.c_int, SLOTS)
_open = RawArray(ctypes.c_int, SLOTS)

# Errors of accept(2) that say nothing about the listening socket: another worker took
# the connection, or it went away before it was taken.
_PASSING = (BlockingIOError, InterruptedError, ConnectionAbortedError)


def _leave(slot: int | None) -> None:
    """This process stops counting in `slot` (unless another already holds it)."""
    if slot is not None and _pids[slot] == os.getpid():
        _pids[slot] = 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Share:
    """This worker's slot: what it tells the others, and whether one of them is less busy."""

    def __init__(self, slot: int | None, state: ServerState) -> None:
        self.slot, self.state = slot, state
        self.handing_over: set[asyncio.Task] = set()

    def held(self) -> int:
        return len(self.state.connections) + len(self.handing_over)

    def publish(self) -> None:
        if self.slot is not None:
            _open[self.slot] = self.held()

    def another_holds_fewer(self) -> bool:
        if self.slot is None:
            return False
        mine = _open[self.slot]
        for slot in range(SLOTS):
            pid = _pids[slot]
            if slot != self.slot and pid and _open[slot] < mine:
                if _alive(pid):
                    return True
                if _pids[slot] == pid:  # killed without a word: its count is stale
                    _pids[slot] = 0
        return False


class Balanced:
    """Accepts from `sock` one connection at a time, when this worker holds no more than any
    other (or has waited DEFER for them), and hands it to the loop as an accepted socket.
    Stands in for the loop's own server in uvicorn's shutdown, which closes it."""

    def __init__(self, sock: socket.socket, protocol_factory, ssl, share: Share) -> None:
        self.sock, self.protocol_factory, self.ssl, self.share = sock, protocol_factory, ssl, share
        self.loop = asyncio.get_running_loop()
        self.closed = self.paused = False
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._ready)

    def _ready(self) -> None:
        self.share.publish()
        if self.share.another_holds_fewer():
            self.loop.remove_reader(self.sock.fileno())
            self.loop.call_later(DEFER, self._deferred)
        else:
            self._take()

    def _deferred(self) -> None:
        if self.closed:
            return
        try:
            self._take()  # if no worker took it meanwhile
        finally:
            if not self.closed and not self.paused:
                self.loop.add_reader(self.sock.fileno(), self._ready)

    def _resume(self) -> None:
        self.paused = False
        if not self.closed:
            self.loop.add_reader(self.sock.fileno(), self._ready)

    def _take(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except _PASSING:
            return
        except OSError as error:
            # Out of descriptors (EMFILE, ENFILE) or buffers: the socket stays readable, so
            # stop listening for a second rather than spin on it (as asyncio's server does).
            log.warning("could not accept a connection, trying again in %.0f s: %s", ACCEPT_RETRY_SECONDS, error)
            self.paused = True
            self.loop.remove_reader(self.sock.fileno())
            self.loop.call_later(ACCEPT_RETRY_SECONDS, self._resume)
            return
        try:
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as error:  # the client reset it already
            log.info("a connection closed before it was served: %s", error)
            conn.close()
            return
        task = self.loop.create_task(self.loop.connect_accepted_socket(self.protocol_factory, conn, ssl=self.ssl))
        self.share.handing_over.add(task)
        task.add_done_callback(self._handed_over)
        self.share.publish()

    def _handed_over(self, task: asyncio.Task) -> None:
        self.share.handing_over.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a TLS handshake that failed, say
            log.info("a connection closed before it was served: %s", task.exception())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.sock.fileno())

    async def wait_closed(self) -> None:
        return None


class BalancedServer(Server):
    """uvicorn's server, gunicorn's listening sockets served by Balanced."""

    def __init__(self, config, slot: int | None) -> None:
        super().__init__(config)
        self.slot = slot

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None:  # uvicorn on its own (`make run`): one process, no one to share with
            await super().startup(sockets=None)
            return
        await super().startup(sockets=[])  # the lifespan, and no server of the loop's own
        if self.should_exit:
            return
        config = self.config

        def create_protocol(_loop=None):
            return config.http_protocol_class(config=config, server_state=self.server_state,
                                              app_state=self.lifespan.state, _loop=_loop)

        share = Share(self.slot, self.server_state)
        self.servers = [Balanced(sock, create_protocol, config.ssl, share) for sock in sockets]
        if self.slot is not None:  # counted by the others from now on, as it now takes connections
            _open[self.slot], _pids[self.slot] = 0, os.getpid()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # No longer taking connections: the others stop leaving theirs to it at once, not
        # after the wait for its open requests (as long as a held wait may take).
        _leave(self.slot)
        await super().shutdown(sockets=sockets)


class UvicornWorker(_UvicornWorker):
    """gunicorn's worker class for Relay's web process (`-k core.serving.UvicornWorker`).
    The master makes each worker before forking it, and gives it the first slot no living
    worker holds (the master drops a worker once it has reaped it)."""

    _made: weakref.WeakSet = weakref.WeakSet()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # A worker gunicorn has reaped may live on in the set until a collection (its
        # config holds a bound method of it): its slot is free once its process is gone.
        held = {worker.slot for worker in UvicornWorker._made if not isinstance(worker.pid, int) or _alive(worker.pid)}
        free = sorted(set(range(SLOTS)) - held)
        self.slot = free[0] if free else None
        UvicornWorker._made.add(self)

    async def _serve(self) -> None:
        self.config.app = self.wsgi
        server = BalancedServer(self.config, self.slot)
        self._install_sigquit_handler()
        try:
            await server.serve(sockets=self.sockets)
        finally:
            _leave(self.slot)
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
