"""Sync (DRF) views under ASGI in the loop's shared thread pool, whose threads keep their
database connections, instead of a new thread and connection per request; and the pools
of the calls that wait on a server someone else chose, each bounded (SECURITY.md,
"Outside calls"), so that no such call holds a thread the other routes need."""
import asyncio
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import partial, wraps
from inspect import iscoroutinefunction

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.cache import close_caches
from django.core.exceptions import ImproperlyConfigured, RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import reset_urlconf
from django.db import close_old_connections, connections, reset_queries
from django.urls import set_script_prefix
from django.views.decorators.csrf import csrf_exempt

# Only the ASGI web process pools (config/asgi.py): under WSGI a view keeps its own thread,
# whose connection may hold the caller's transaction.
SERVING_ASGI = os.environ.get("RELAY_SERVING_ASGI") == "1"


class PoolFull(Exception):
    """Every thread of a kind of outside call is busy: the API's 503 backend_unavailable
    with Retry-After (api/errors.py), from any door."""

    def __init__(self, kind: str, retry_after: int) -> None:
        self.message = f"Too many {kind} are under way on this server; try again in {retry_after} s."
        self.retry_after = retry_after
        super().__init__(self.message)


class BoundedPool:
    """The threads of one kind of outside call: at most `size` calls at once and `waiting`
    more waiting for a thread (none by default). A call past them is refused (PoolFull) at
    once: queued without end, it would wait behind the slow ones, and its caller's
    connection with it."""

    def __init__(self, kind: str, size: int, *, retry_after: int, waiting: int = 0) -> None:
        self.kind, self.size, self.retry_after = kind, size, retry_after
        self.executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=kind.replace(" ", "-"))
        self._free = threading.BoundedSemaphore(size + waiting)

    def bind(self, function):
        """`function` as a coroutine on this pool's threads (PoolFull when it is full)."""
        async def bound(*args, **kwargs):
            if not self._free.acquire(blocking=False):
                raise PoolFull(self.kind, self.retry_after)
            place = _Place(self._free)

            def call():
                place.started = True
                try:
                    usable_connections()
                    return function(*args, **kwargs)
                finally:
                    place.give_back()

            try:
                return await sync_to_async(call, thread_sensitive=False, executor=self.executor)()
            finally:
                # A caller that went away before a thread took the call (the call never
                # runs): its place back. One that runs gives it back when it ends.
                if not place.started:
                    place.give_back()

        return bound


class _Place:
    def __init__(self, free: threading.BoundedSemaphore) -> None:
        self._free, self._lock, self._given_back, self.started = free, threading.Lock(), False, False

    def give_back(self) -> None:
        with self._lock:
            if not self._given_back:
                self._given_back = True
                self._free.release()


# A domain's verification waits on DNS a caller published; a spam check on spamd (up to
# RELAY_SPAMD_TIMEOUT_SECONDS); an OAuth consent page for an agent whose client ID is a
# URL on its client ID document, from a server the agent chose (up to 5 s). A verification
# is bounded by RELAY_DNS_TIMEOUT_SECONDS and by its account's verifies a minute, so a few
# may wait their turn (a burst from one account meets its own 429).
DNS_CHECKS = BoundedPool("domain checks", 4, retry_after=5, waiting=28)
SPAM_CHECKS = BoundedPool("spam checks", settings.RELAY_SPAMD_THREADS, retry_after=settings.RELAY_SPAMD_TIMEOUT_SECONDS)
CLIENT_DOCUMENTS = BoundedPool("client ID document fetches", settings.RELAY_CLIENT_DOCUMENT_THREADS, retry_after=5)


class _RequestThread(ThreadPoolExecutor):
    """One thread for a request's thread-sensitive calls, counting the calls not yet done."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="request")
        self._counting = threading.Lock()
        self.pending = 0
        self.calls = 0  # ever submitted: whether a request ran anything here

    def submit(self, fn, /, *args, **kwargs):
        with self._counting:
            self.pending += 1
            self.calls += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, future) -> None:
        with self._counting:
            self.pending -= 1


class RequestThreads:
    """The threads Django runs a request's thread-sensitive calls on (its signals, the
    response's close, a view that is not pooled), one request at a time each, kept for
    the next request instead of a thread started and joined for every one (asgiref's
    default, which holds the event loop while each starts). A thread still busy when its
    request ends (a cancelled call) is not kept."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.free: list[_RequestThread] = []

    def take(self) -> _RequestThread:
        return self.free.pop() if self.free else _RequestThread()

    def give_back(self, thread: _RequestThread, *, finished: bool = True) -> None:
        """`thread` kept for another request, unless its request did not finish (its
        request_finished may not have run there, to close what it opened) or a call of
        it is still under way."""
        if finished and thread.pending == 0 and len(self.free) < self.most:
            self.free.append(thread)
        else:
            if thread.calls:  # it may hold a connection: closed after what it still runs, not left to the collector
                thread.submit(connections.close_all)
            thread.shutdown(wait=False)


# The event loop's thread takes and gives back (one per process): as many as requests at once.
REQUEST_THREADS = RequestThreads(most=64)


class KeptThreadsASGIHandler(ASGIHandler):
    """Django's ASGI handler (config/asgi.py), each request's thread-sensitive calls on a
    thread of REQUEST_THREADS, kept for the next request, rather than one started for it,
    and Django's own middleware run on the event loop where it does no I/O
    (core.middleware), and Django's request signals there only when they have something
    to do there (`handle`). An API request's objects are freed as soon as it is answered,
    not left in reference cycles for the garbage collector (`listen_for_disconnect`,
    `let_go`)."""

    def load_middleware(self, is_async=False):
        from core.middleware import ON_THE_LOOP

        named = settings.MIDDLEWARE
        settings.MIDDLEWARE = [ON_THE_LOOP.get(path, path) for path in named] if is_async else named
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = named
        if self._template_response_middleware:
            # It would run before a response is rendered; rendered_where_made renders
            # a pooled view's response in its pool, before any middleware sees it.
            raise ImproperlyConfigured(
                "core.pools.KeptThreadsASGIHandler renders a pooled view's response where the view ran: "
                "no middleware may have process_template_response, and "
                + ", ".join(type(hook.__self__).__name__ for hook in self._template_response_middleware) + " has")

    async def listen_for_disconnect(self, receive):
        """Django's, but a disconnect returns rather than raising RequestAborted, which
        handle() ignores either way: the exception kept on the task held handle()'s frame
        through its traceback, and with it the request, in a cycle."""
        message = await receive()
        if message["type"] != "http.disconnect":
            raise AssertionError(f"Invalid ASGI message after request body: {message['type']}")

    async def run_get_response(self, request):
        response = await super().run_get_response(request)
        let_go(request, response)
        return response

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        thread, finished = REQUEST_THREADS.take(), False
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send, thread=thread)
            finished = True
        finally:
            REQUEST_THREADS.give_back(thread, finished=finished)

    async def handle(self, scope, receive, send, thread: _RequestThread | None = None):
        """Django 5.2's ASGIHandler.handle, but for two of its trips to the request's
        thread: the request_started signal and the response's close (which sends
        request_finished), left out or made on the loop where they have nothing to do
        there (`_on_the_loop`). With the rendering done where a pooled view ran
        (rendered_where_made), an API request makes no trip to its thread at all, where
        it made three; each costs the web process tens of microseconds of CPU and a
        wait for the thread (docs/benchmarks.md, "A request's trips to its thread")."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        calls = thread.calls if thread is not None else None
        if not (_closed_after_each_request() and _on_the_loop(signals.request_started, self.__class__)):
            await signals.request_started.asend(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return

        async def process_request(request, send):
            response = await self.run_get_response(request)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while it was sent
            return response

        # Django's: listen for the client's disconnect while the response is made, and
        # cancel the view if it goes.
        tasks = [asyncio.create_task(self.listen_for_disconnect(receive)),
                 asyncio.create_task(process_request(request, send))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            # The response's own closers are the request's (its uploads' files) unless the
            # view added some (a file it streams).
            if (thread is not None and thread.calls == calls
                    and all(closer == request.close for closer in response._resource_closers)
                    and _on_the_loop(signals.request_finished, self.__class__)):
                response.close()
            else:
                await sync_to_async(response.close)()
        body_file.close()


# Django's own receivers of its request signals. Two act on the database connections of
# the thread they run on: on the event loop's, which never opens one, they find none. The
# other two act on the request's context, the same on any thread.
_DJANGOS_OWN = frozenset({reset_queries, close_old_connections, close_caches, reset_urlconf})


def _on_the_loop(signal, sender) -> bool:
    """Whether `signal` may be sent on the event loop (or, for request_started, not at
    all): it has no receiver but Django's own. request_started's act on connections of
    the request's thread, and a kept thread holds none when its next request starts if
    connections close after each request (_closed_after_each_request): the last request
    that ran anything on it ended with request_finished there. request_finished's are
    sent on the loop only for a request that ran nothing on its thread (a pooled view,
    core.pools.pooled): that thread holds no connection to close. Any other receiver
    (another app's) is sent as Django sends it."""
    sync_receivers, async_receivers = signal._live_receivers(sender)
    return not async_receivers and _DJANGOS_OWN.issuperset(sync_receivers)


def _closed_after_each_request() -> bool:
    """Whether request_finished closes every database connection a request's thread
    opened (CONN_MAX_AGE 0, as in the web process: config/settings.py)."""
    return all(database.get("CONN_MAX_AGE") == 0 for database in settings.DATABASES.values())


def let_go(request, response) -> None:
    """Break the reference cycles a request's objects form once every middleware is done
    with them (the response rendered, only to be sent), so that reference counting frees
    them at once. Left to the garbage collector, every request's few hundred objects made
    it run a collection every few requests, pausing the event loop and every request on
    it for up to tens of milliseconds (docs/benchmarks.md, "Garbage a request leaves").
    The cycles: the request and what the message and authentication middleware hang on
    it (the message storage, the user's lazy loaders), each naming the request again;
    DRF's view (which holds its own `get` as `head`, Django's View.setup), its Request
    (whose parser context names both) and its Response (whose renderer context names all
    three): the view is done with, and forgets all it held. A streamed response (an event
    stream) is not answered yet: what it streams may still read its request. A plain
    Django view's own cycle (its `head`) is out of reach here: the response does not
    name it; the inbox's pages leave it to the collector."""
    if response.streaming:
        return
    for name in ("_messages", "user", "auser"):
        request.__dict__.pop(name, None)
    rendered = getattr(response, "renderer_context", None)
    if isinstance(rendered, dict):
        parsed = getattr(rendered.get("request"), "parser_context", None)
        if isinstance(parsed, dict):
            parsed.clear()
        view = rendered.get("view")
        if view is not None:
            vars(view).clear()
        rendered.clear()


def usable_connections() -> None:
    """Before a pooled call: drop a connection that broke or was left in a transaction."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if connection.in_atomic_block or (connection.errors_occurred and not connection.is_usable()):
            connection.close()
        connection.errors_occurred = False


def in_pool(function, executor: BoundedPool | None = None):
    """`function` as a coroutine running in the shared thread pool (or a bounded pool of its
    kind), with usable connections."""
    if executor is not None:
        return executor.bind(function)
    if not SERVING_ASGI:
        return sync_to_async(function)

    def call(*args, **kwargs):
        usable_connections()
        return function(*args, **kwargs)

    return sync_to_async(call, thread_sensitive=False)


async def _as_rendered(response: weakref.ref):
    return response()


def rendered_where_made(view):
    """`view`, its response rendered on the thread that made it. Django's handler renders
    a response that has a `render` (DRF's, a template's) after the middleware's views
    hooks, and a sync `render` on the request's thread: a trip there for every API
    request, only to encode JSON. Rendered here, its `render` is left as a coroutine
    that gives it back as it is, which the handler awaits on the loop; it names the
    response weakly, so the response is not left in a cycle. No middleware may have
    process_template_response, which would have run before (KeptThreadsASGIHandler's
    load_middleware refuses one). Only in the ASGI web process, whose handler awaits it:
    Django's sync handler (WSGI, the test client) would call it."""
    if not SERVING_ASGI:
        return view

    @wraps(view)
    def rendering(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        render = getattr(response, "render", None)
        if callable(render) and not iscoroutinefunction(render):
            response = render()  # another response, if a post-render callback made one
            if callable(getattr(response, "render", None)) and getattr(response, "is_rendered", False):
                response.render = partial(_as_rendered, weakref.ref(response))
        return response

    return rendering


def _pooled(view, pool):
    """The coroutine running `view`, its response rendered there: in the shared pool, or in
    `pool`'s threads (a BoundedPool, or a function of the request and the route's
    arguments choosing one or None); PoolFull when that one is full (api.middleware
    answers it)."""
    view = rendered_where_made(view)
    shared = in_pool(view)
    choose = pool if callable(pool) and not isinstance(pool, BoundedPool) else (lambda request, kwargs: pool)

    async def run(request, *args, **kwargs):
        chosen = choose(request, kwargs)
        if chosen is None:
            return await shared(request, *args, **kwargs)
        return await chosen.bind(view)(request, *args, **kwargs)

    return run


def pooled(view, pool=None):
    """An async view running the sync `view` in the shared pool (or `pool`, see _pooled);
    drf-spectacular still documents the DRF view behind it."""
    if not SERVING_ASGI:
        return view
    run = _pooled(view, pool)

    @csrf_exempt
    @wraps(view)
    async def pooled_view(request, *args, **kwargs):
        return await run(request, *args, **kwargs)

    pooled_view.cls, pooled_view.initkwargs = view.cls, view.initkwargs
    return pooled_view


def pooled_page(view, pool=None):
    """A plain Django view (a web inbox page) run as `pooled` runs the API's: in the shared
    pool (or `pool`), its CSRF protection kept."""
    if not SERVING_ASGI:
        return view
    run = _pooled(view, pool)

    @wraps(view)
    async def pooled_view(request, *args, **kwargs):
        return await run(request, *args, **kwargs)

    return pooled_view
