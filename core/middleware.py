"""Django's own middleware, run on the event loop under ASGI where a hook does no I/O.

Django's `MiddlewareMixin` under ASGI sends every `process_request` and `process_response`
to the request's thread, and its handler each `process_view` too: for the seven of them
Relay runs, 13 trips a request, about 80 µs of CPU each and a wait for the thread and the
GIL (docs/benchmarks.md, "A request's trips to its thread"). Their hooks only read the
request and set headers, but for three cases that may reach the database: a session to
save (SessionMiddleware), messages to store (MessageMiddleware), and an unsafe method's
CSRF check, which may read a form or a file upload (CsrfViewMiddleware). Those still go
to the thread.

The web process's handler (core.pools.KeptThreadsASGIHandler) loads these in place of
Django's (ON_THE_LOOP); settings.MIDDLEWARE keeps naming Django's own classes, which
`check --deploy` looks for by name, and WSGI (the test client, `manage.py runserver`)
runs them unchanged.
"""
from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware

SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")


def _in_thread(hook):
    return sync_to_async(hook, thread_sensitive=True)


class OnTheLoop:
    """A MiddlewareMixin's hooks, in async mode, called on the event loop unless its
    `*_needs_thread` says this request's would do I/O."""

    def __init__(self, get_response) -> None:
        super().__init__(get_response)
        if iscoroutinefunction(self) and hasattr(self, "process_view"):
            # Django's handler sends a plain process_view to the thread; a coroutine it awaits.
            in_order = self.process_view

            async def process_view(request, callback, callback_args, callback_kwargs):
                if self.view_needs_thread(request, callback):
                    return await _in_thread(in_order)(request, callback, callback_args, callback_kwargs)
                return in_order(request, callback, callback_args, callback_kwargs)

            self.process_view = process_view

    def request_needs_thread(self, request) -> bool:
        return False

    def response_needs_thread(self, request) -> bool:
        return False

    def view_needs_thread(self, request, callback) -> bool:
        return False

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            if self.request_needs_thread(request):
                response = await _in_thread(self.process_request)(request)
            else:
                response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request):
                response = await _in_thread(self.process_response)(request, response)
            else:
                response = self.process_response(request, response)
        return response


class LoopSecurityMiddleware(OnTheLoop, SecurityMiddleware):
    """Headers and the HTTPS redirect: no I/O."""


class LoopCommonMiddleware(OnTheLoop, CommonMiddleware):
    """The slash redirect (a URL resolve) and Content-Length: no I/O."""


class LoopAuthenticationMiddleware(OnTheLoop, AuthenticationMiddleware):
    """Sets request.user lazily: read, in the view's thread, if the view asks."""


class LoopXFrameOptionsMiddleware(OnTheLoop, XFrameOptionsMiddleware):
    """One header."""


class LoopSessionMiddleware(OnTheLoop, SessionMiddleware):
    """The session store is made lazily; a session is saved only when changed."""

    def response_needs_thread(self, request) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class LoopMessageMiddleware(OnTheLoop, MessageMiddleware):
    """The storage is made lazily; messages read or added are stored back (in the session)."""

    def response_needs_thread(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class LoopCsrfViewMiddleware(OnTheLoop, CsrfViewMiddleware):
    """The token comes from a cookie; an unsafe method's check may read the body's form."""

    def request_needs_thread(self, request) -> bool:
        return settings.CSRF_USE_SESSIONS

    def response_needs_thread(self, request) -> bool:
        return settings.CSRF_USE_SESSIONS

    def view_needs_thread(self, request, callback) -> bool:
        return (settings.CSRF_USE_SESSIONS or request.method not in SAFE_METHODS) \
            and not getattr(callback, "csrf_exempt", False)


ON_THE_LOOP = {
    "django.middleware.security.SecurityMiddleware": "core.middleware.LoopSecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware": "core.middleware.LoopSessionMiddleware",
    "django.middleware.common.CommonMiddleware": "core.middleware.LoopCommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware": "core.middleware.LoopCsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware": "core.middleware.LoopAuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware": "core.middleware.LoopMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware": "core.middleware.LoopXFrameOptionsMiddleware",
}
