"""Running the API's sync (DRF) views under ASGI without a thread and a database
connection per request.

Django runs a sync view in a thread of the request's own, made for that request; a
connection opened there cannot outlive it (config/asgi.py closes them), so every request
paid for a new PostgreSQL connection: 135 req/s for a trivial authenticated view, against
919 under WSGI (bench/api.py). `pooled(view)` runs the view in the event loop's shared
thread pool instead, whose few threads keep their connections from request to request,
as WSGI workers do."""
import os
from concurrent.futures import ThreadPoolExecutor
from functools import wraps

from asgiref.sync import sync_to_async
from django.db import connections
from django.views.decorators.csrf import csrf_exempt

# Only the ASGI web process pools (config/asgi.py sets it). Under WSGI (manage.py
# commands, Django's test client) a sync view already has its thread and keeps its
# connection, and running it elsewhere would move it off the thread whose connection
# holds the caller's transaction.
SERVING_ASGI = os.environ.get("RELAY_SERVING_ASGI") == "1"

# A domain's verification waits on DNS the caller published (up to
# RELAY_DNS_TIMEOUT_SECONDS, uncached): it runs in these threads of its own, so a silent
# nameserver holds them and never the shared ones that serve every other request.
DNS_CHECKS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dns-checks")


def usable_connections() -> None:
    """Before a pooled call: drop a connection that broke (a database restart, a killed
    backend) or was left inside a transaction, so the view gets a working one. Kept
    connections are otherwise reused; the ASGI web process sets CONN_MAX_AGE to 0 for
    the per-request threads, which does not apply here."""
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
