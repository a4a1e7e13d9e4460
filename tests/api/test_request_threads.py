"""The web process's Django handler (core.pools.KeptThreadsASGIHandler, config/asgi.py): a
request's thread-sensitive calls (Django's request signals, the response's close, a view
that is not pooled) run on one thread, kept for the next request, instead of a thread
started and joined for each; a thread still busy when its request ends is not kept. And
Django's own middleware runs on the event loop (core/middleware.py): a read makes no trip
to its request's thread for it, while what may read a body (a form's CSRF check) still
does."""
import asyncio
import gc
import threading
from contextlib import contextmanager

from asgiref.sync import SyncToAsync, async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished, request_started

from core.pools import KeptThreadsASGIHandler, RequestThreads


def _scope(path: str, method: str = "GET") -> dict:
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": [(b"host", b"localhost")], "http_version": "1.1", "scheme": "http",
            "server": ("localhost", 80), "client": ("127.0.0.1", 40000), "root_path": ""}


def _get(app, path: str, method: str = "GET") -> int:
    async def run() -> int:
        communicator = ApplicationCommunicator(app, _scope(path, method))
        await communicator.send_input({"type": "http.request", "body": b""})
        start = await communicator.receive_output(30)
        while (await communicator.receive_output(30)).get("more_body"):
            pass
        await communicator.wait(30)  # the handler returned: its thread is given back
        return start["status"]

    return async_to_sync(run)()


@contextmanager
def _trips():
    """The calls sent to the request's thread (thread-sensitive ones) meanwhile, by name."""
    trips = []
    counted = SyncToAsync.__call__

    async def counting(self, *args, **kwargs):
        if self._thread_sensitive:
            trips.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await counted(self, *args, **kwargs)

    SyncToAsync.__call__ = counting
    try:
        yield trips
    finally:
        SyncToAsync.__call__ = counted


def test_each_requests_thread_sensitive_calls_share_a_thread_kept_for_the_next_request(db):
    seen = []

    def started(**kwargs):
        seen.append(("started", threading.get_ident()))

    def finished(**kwargs):
        seen.append(("finished", threading.get_ident()))

    request_started.connect(started)
    request_finished.connect(finished)
    try:
        app = KeptThreadsASGIHandler()
        statuses = [_get(app, "/api/v1/mailboxes") for _ in range(3)]
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    assert statuses == [401, 401, 401]
    assert [event for event, _ in seen] == ["started", "finished"] * 3
    threads = {thread for _, thread in seen}
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_a_thread_still_busy_when_its_request_ends_is_not_kept():
    threads = RequestThreads(most=4)
    idle = threads.take()
    idle.submit(lambda: None).result(timeout=10)
    threads.give_back(idle)
    assert threads.take() is idle

    busy, release = threads.take(), threading.Event()
    call = busy.submit(release.wait, 10)
    threads.give_back(busy)
    assert busy not in threads.free
    release.set()
    call.result(timeout=10)
    assert threads.take() is not busy


def test_django_middleware_makes_no_trip_to_the_request_thread_under_asgi():
    """Django's MiddlewareMixin sends each process_request and process_response to the
    request's thread: 13 trips for Relay's seven; on the loop, what is left is Django's
    own: its request_started signal, the view (a plain sync view here) and the
    response's close."""
    with _trips() as ours:
        assert _get(KeptThreadsASGIHandler(), "/healthz") == 200
    with _trips() as djangos:
        assert _get(ASGIHandler(), "/healthz") == 200
    assert len(ours) <= 3, ours
    assert len(djangos) - len(ours) >= 13, (djangos, ours)


def test_a_form_post_without_its_csrf_token_is_refused_by_the_check_in_the_request_thread():
    """What may read a body stays off the loop: an unsafe method's CSRF check (a sign-in
    form posted without its token) runs in the request's thread, and refuses."""
    with _trips() as trips:
        assert _get(KeptThreadsASGIHandler(), "/inbox/sign-in", method="POST") == 403
    assert any("process_view" in trip for trip in trips), trips


def _cyclic_garbage_of_requests(app, path: str, count: int) -> list:
    """The objects `count` requests to `path` leave in reference cycles, driven as uvicorn
    drives them: the client's disconnect is what receive() gives once the response is
    complete (Django's handler listens for it meanwhile)."""

    async def one() -> int:
        answered = asyncio.Event()
        asked = False

        async def receive():
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await answered.wait()
            return {"type": "http.disconnect"}

        statuses = []

        async def send(message):
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
            elif not message.get("more_body"):
                answered.set()

        await app(_scope(path), receive, send)
        return statuses[0]

    async def run() -> list[int]:
        return [await one() for _ in range(count)]

    async_to_sync(run)()  # the first requests load what stays loaded
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        statuses = async_to_sync(run)()
        gc.collect()
        garbage = [type(thing).__qualname__ for thing in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert set(statuses) == {401}, statuses
    return garbage


def test_a_requests_objects_are_freed_once_it_is_answered_not_left_in_cycles_for_the_collector(db):
    """Left in reference cycles, each request's objects waited for a collection, which ran
    every few requests and paused every request of the process (docs/benchmarks.md,
    "Garbage a request leaves"). Django's own handler leaves them there: the disconnect's
    RequestAborted holding the handler's frame, the message storage and the user's
    loaders naming the request, DRF's view, Request and Response naming each other."""
    ours = _cyclic_garbage_of_requests(KeptThreadsASGIHandler(), "/api/v1/mailboxes", 20)
    djangos = _cyclic_garbage_of_requests(ASGIHandler(), "/api/v1/mailboxes", 20)
    for kind in ("ASGIRequest", "Request", "Response", "RequestAborted", "FallbackStorage", "MailboxCollectionView"):
        assert djangos.count(kind) >= 20, (kind, djangos.count(kind))
        assert ours.count(kind) == 0, (kind, sorted(ours))
