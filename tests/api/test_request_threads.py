"""The web process's Django handler (core.pools.KeptThreadsASGIHandler, config/asgi.py): a
request's thread-sensitive calls (Django's request signals, the response's close, a view
that is not pooled) run on one thread, kept for the next request, instead of a thread
started and joined for each; a thread still busy when its request ends is not kept. And
Django's own middleware runs on the event loop (core/middleware.py): a read makes no trip
to its request's thread for it, while what may read a body (a form's CSRF check) still
does. Django's request signals go to that thread only when they have something to do
there: a request that ran nothing on it (a pooled view) makes no trip at all."""
import asyncio
import gc
import hashlib
import inspect
import json
import threading
from contextlib import contextmanager
from types import ModuleType

import pytest
from asgiref.sync import SyncToAsync, async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished, request_started
from django.db import connections
from django.db.backends.signals import connection_created
from django.http import HttpResponseNotModified, StreamingHttpResponse
from django.template import engines
from django.template.response import SimpleTemplateResponse
from django.urls import path

import core.pools
from core.pools import REQUEST_THREADS, KeptThreadsASGIHandler, RequestThreads


def _scope(path: str, method: str = "GET") -> dict:
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": [(b"host", b"localhost")], "http_version": "1.1", "scheme": "http",
            "server": ("localhost", 80), "client": ("127.0.0.1", 40000), "root_path": ""}

# The first 16 hex digits of the SHA-256 of Django 5.2's ASGIHandler.handle's source.
DJANGOS_HANDLE = "98faeb5bef800331"


async def _answer(app, path: str, method: str = "GET") -> dict:
    communicator = ApplicationCommunicator(app, _scope(path, method))
    await communicator.send_input({"type": "http.request", "body": b""})
    start, body = await communicator.receive_output(30), b""
    while True:
        part = await communicator.receive_output(30)
        body += part.get("body", b"")
        if not part.get("more_body"):
            break
    await communicator.wait(30)  # the handler returned: its thread is given back
    return {"status": start["status"], "body": body}


def _get(app, path: str, method: str = "GET") -> int:
    return async_to_sync(_answer)(app, path, method)["status"]


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


@contextmanager
def _signals_seen():
    """Django's request signals received meanwhile, by a receiver of another app's: each
    as (its name, the thread it ran on)."""
    seen = []

    def started(**kwargs):
        seen.append(("started", threading.get_ident()))

    def finished(**kwargs):
        seen.append(("finished", threading.get_ident()))

    request_started.connect(started)
    request_finished.connect(finished)
    try:
        yield seen
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)


def test_each_requests_thread_sensitive_calls_share_a_thread_kept_for_the_next_request(db):
    with _signals_seen() as seen:
        app = KeptThreadsASGIHandler()
        statuses = [_get(app, "/api/v1/mailboxes") for _ in range(3)]
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
    request's thread: 13 trips for Relay's seven; on the loop, what is left is the view (a
    plain sync view here) and the response's close, which closes what the view opened
    there."""
    with _trips() as ours:
        assert _get(KeptThreadsASGIHandler(), "/healthz") == 200
    with _trips() as djangos:
        assert _get(ASGIHandler(), "/healthz") == 200
    assert len(ours) <= 3, ours
    assert len(djangos) - len(ours) >= 13, (djangos, ours)


@pytest.fixture
def pooled_route(settings, monkeypatch):
    """An API route as the web process serves it: its view pooled (core.pools.pooled), and
    database connections closed at the end of each request (config/settings.py)."""
    from api.views import MailboxCollectionView

    monkeypatch.setattr(core.pools, "SERVING_ASGI", True)
    monkeypatch.setitem(settings.DATABASES["default"], "CONN_MAX_AGE", 0)
    urls = ModuleType("pooled_urls")
    urls.urlpatterns = [path("mailboxes", core.pools.pooled(MailboxCollectionView.as_view())),
                        path("streamed", core.pools.pooled_page(_streamed)),
                        path("replaced", core.pools.pooled_page(_replaced_once_rendered))]
    settings.ROOT_URLCONF = urls
    return "/mailboxes"


class _Chunks:
    """What a pooled view streams, with a close of its own (as a file has), and where that
    close ran."""

    def __init__(self) -> None:
        self.left, self.closed_on = [b"a chunk"], None

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        if not self.left:
            raise StopAsyncIteration
        return self.left.pop()

    def close(self) -> None:
        self.closed_on = threading.get_ident()


def _streamed(request):
    _CHUNKS[0] = _Chunks()
    return StreamingHttpResponse(_CHUNKS[0])


_CHUNKS = [None]


def _replaced_once_rendered(request):
    """A response whose post-render callback answers with another (as a conditional
    GET's 304 would)."""
    response = SimpleTemplateResponse(engines["django"].from_string("rendered"))
    response.add_post_render_callback(lambda rendered: HttpResponseNotModified())
    return response


def test_a_pooled_api_request_makes_no_trip_to_its_thread(db, pooled_route):
    """Django sends its request_started signal, the rendering of a response that has a
    `render` (DRF's) and the response's close (request_finished) to the request's thread,
    three trips of about 80 µs of CPU each. A pooled view's response is rendered in the
    pool where it is made; the signals' receivers close that thread's database
    connections, and a request that ran nothing there left none."""
    with _trips() as ours:
        assert _get(KeptThreadsASGIHandler(), pooled_route) == 401
    with _trips() as djangos:
        assert _get(ASGIHandler(), pooled_route) == 401
    assert ours == []
    assert "HttpResponseBase.close" in djangos and any("asend" in trip for trip in djangos), djangos


def test_a_pooled_views_response_rendered_in_the_pool_is_sent_whole(db, pooled_route):
    sent = async_to_sync(_answer)(KeptThreadsASGIHandler(), pooled_route)
    assert sent["status"] == 401
    assert json.loads(sent["body"])["code"] == "unauthorized"


def test_the_response_a_post_render_callback_made_is_the_one_sent(db, pooled_route):
    assert _get(KeptThreadsASGIHandler(), "/replaced") == 304


def test_another_apps_receiver_of_the_request_signals_still_runs_on_the_request_thread(db, pooled_route):
    with _signals_seen() as seen, _trips() as trips:
        assert _get(KeptThreadsASGIHandler(), pooled_route) == 401
    assert [event for event, _ in seen] == ["started", "finished"]
    assert len(trips) == 2, trips
    threads = {thread for _, thread in seen}
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_another_apps_receiver_of_request_finished_alone_runs_on_the_request_thread(db, pooled_route):
    finished = []

    def on_finished(**kwargs):
        finished.append(threading.get_ident())

    request_finished.connect(on_finished)
    try:
        with _trips() as trips:
            assert _get(KeptThreadsASGIHandler(), pooled_route) == 401
    finally:
        request_finished.disconnect(on_finished)
    assert trips == ["HttpResponseBase.close"]
    assert len(finished) == 1 and finished[0] != threading.get_ident()


def test_connections_kept_past_a_request_still_get_request_started_on_the_thread(db, pooled_route, monkeypatch, settings):
    """With CONN_MAX_AGE above 0 a kept thread may hold a connection grown old between
    requests, which request_started's close_old_connections closes."""
    monkeypatch.setitem(settings.DATABASES["default"], "CONN_MAX_AGE", 60)
    with _trips() as trips:
        assert _get(KeptThreadsASGIHandler(), pooled_route) == 401
    assert any("asend" in trip for trip in trips), trips


def test_a_response_with_closers_of_its_own_is_closed_on_the_request_thread(db, pooled_route):
    """What it streams may close as a file does, which may block: not on the loop."""
    with _trips() as trips:
        assert _get(KeptThreadsASGIHandler(), "/streamed") == 200
    assert trips == ["HttpResponseBase.close"], trips
    assert _CHUNKS[0].closed_on not in (None, threading.get_ident())


def test_a_request_that_did_not_finish_does_not_keep_its_thread(transactional_db, settings, monkeypatch):
    """Its request_finished may not have run on the thread, to close the connection its
    view opened there; the next request on a kept thread would not send request_started."""
    monkeypatch.setitem(settings.DATABASES["default"], "CONN_MAX_AGE", 0)
    while REQUEST_THREADS.free:
        REQUEST_THREADS.free.pop().shutdown(wait=False)

    asked = False

    async def receive():
        nonlocal asked
        if asked:
            await asyncio.Event().wait()  # the client stays
        asked = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send_failing(message):
        raise OSError("the connection broke")

    async def failing():
        with pytest.raises(OSError):
            await KeptThreadsASGIHandler()(_scope("/readyz"), receive, send_failing)

    async_to_sync(failing)()
    assert REQUEST_THREADS.free == []
    _get(KeptThreadsASGIHandler(), "/readyz")
    assert len(REQUEST_THREADS.free) == 1


def test_the_handlers_copy_is_of_this_djangos_handle():
    """KeptThreadsASGIHandler.handle is Django 5.2's ASGIHandler.handle but for the request
    signals: a Django whose handle changed needs the copy made again."""
    source = inspect.getsource(ASGIHandler.handle)
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == DJANGOS_HANDLE, (
        "django.core.handlers.asgi.ASGIHandler.handle changed: compare core.pools.KeptThreadsASGIHandler.handle "
        "with it, then record the new digest here")


def test_a_view_that_opened_a_connection_on_its_thread_leaves_it_closed(transactional_db, settings, monkeypatch):
    """/readyz asks the database from its request's thread; the response's close, sent
    there, closes that connection (CONN_MAX_AGE 0 in the web process), so a kept thread
    holds none when its next request starts, which then needs no request_started trip."""
    monkeypatch.setitem(settings.DATABASES["default"], "CONN_MAX_AGE", 0)  # as in the web process
    opened = []

    def connected(sender, connection, **kwargs):
        opened.append(threading.get_ident())

    connection_created.connect(connected)
    try:
        with _trips() as trips:
            _get(KeptThreadsASGIHandler(), "/readyz")
    finally:
        connection_created.disconnect(connected)
    kept = REQUEST_THREADS.free[-1]
    assert kept.submit(threading.get_ident).result(10) in opened
    assert kept.submit(lambda: connections["default"].connection).result(10) is None
    assert "HttpResponseBase.close" in trips and not any("asend" in trip for trip in trips), trips


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


def test_a_pooled_views_response_rendered_in_the_pool_leaves_no_cycle(db, pooled_route):
    """The response's `render` left by core.pools.rendered_where_made names the response;
    let_go drops it."""
    ours = _cyclic_garbage_of_requests(KeptThreadsASGIHandler(), pooled_route, 20)
    for kind in ("ASGIRequest", "Request", "Response", "partial"):
        assert ours.count(kind) == 0, (kind, sorted(ours))
