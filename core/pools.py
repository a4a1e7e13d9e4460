"""Sync (DRF) views under ASGI in the loop's shared thread pool, whose threads keep their
database connections, instead of a new thread and connection per request."""
import os
from concurrent.futures import ThreadPoolExecutor
from functools import wraps

from asgiref.sync import sync_to_async
from django.db import connections
from django.views.decorators.csrf import csrf_exempt

# Only the ASGI web process pools (config/asgi.py): under WSGI a view keeps its own thread,
# whose connection may hold the caller's transaction.
SERVING_ASGI = os.environ.get("RELAY_SERVING_ASGI") == "1"

# A domain's verification waits on DNS a caller published: threads of its own.
DNS_CHECKS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dns-checks")


def usable_connections() -> None:
    """Before a pooled call: drop a connection that broke or was left in a transaction."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if connection.in_atomic_block or (connection.errors_occurred and not connection.is_usable()):
            connection.close()
        connection.errors_occurred = False


def in_pool(function, executor: ThreadPoolExecutor | None = None):
    """`function` as a coroutine running in the shared thread pool (or `executor`), with
    usable connections."""
    if not SERVING_ASGI and executor is None:
        return sync_to_async(function)

    def call(*args, **kwargs):
        usable_connections()
        return function(*args, **kwargs)

    return sync_to_async(call, thread_sensitive=False, executor=executor)


def pooled(view, executor: ThreadPoolExecutor | None = None):
    """An async view running the sync `view` in the shared pool (or `executor`);
    drf-spectacular still documents the DRF view behind it."""
    if not SERVING_ASGI:
        return view
    run = in_pool(view, executor)

    @csrf_exempt
    @wraps(view)
    async def pooled_view(request, *args, **kwargs):
        return await run(request, *args, **kwargs)

    pooled_view.cls, pooled_view.initkwargs = view.cls, view.initkwargs
    return pooled_view


def pooled_page(view):
    """A plain Django view (a web inbox page) run as `pooled` runs the API's: in the shared
    pool, its CSRF protection kept."""
    if not SERVING_ASGI:
        return view
    run = in_pool(view)

    @wraps(view)
    async def pooled_view(request, *args, **kwargs):
        return await run(request, *args, **kwargs)

    return pooled_view
