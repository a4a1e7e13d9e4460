"""Middleware both sync- and async-capable, so no request parks a thread: JSON errors for
what Django answers before a view, and WhiteNoise's static files with an async path."""
import functools
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import JsonResponse
from whitenoise.middleware import WhiteNoiseMiddleware

from api.errors import MESSAGES, error_body, json_error_response
from core.pools import PoolFull

# Pages for people, which keep their own HTML: the admin, the web inbox (its home is "/"),
# the pages the links in activation and recovery mails open, and the OAuth consent page
# (which answers a program's request in JSON itself: inbox.views.consent_refused).
HTML_PREFIXES = ("/admin/", "/activate/", "/recover/", "/inbox/", "/oauth/authorize")


class JsonErrorsMiddleware:
    async_capable = True
    sync_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(self.get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return self.as_json(request, self.get_response(request))

    async def __acall__(self, request):
        return self.as_json(request, await self.get_response(request))

    @staticmethod
    def process_exception(request, exception):
        """A kind of outside call's threads all busy (core.pools): 503 with Retry-After, for
        the API and the pages alike."""
        if isinstance(exception, PoolFull):
            return json_error_response(exception)
        return None

    @staticmethod
    def as_json(request, response):
        if (400 <= response.status_code < 500 and not request.path.startswith(HTML_PREFIXES) and request.path != "/"
                and not response.get("Content-Type", "").startswith("application/json")):
            message = MESSAGES.get(response.status_code, "The request could not be handled.")
            return JsonResponse(error_body(response.status_code, message), status=response.status_code)
        return response


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    async_capable = True
    sync_capable = True

    def __init__(self, get_response=None):
        super().__init__(get_response)
        if iscoroutinefunction(self.get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return super().__call__(request)

    async def __acall__(self, request):
        static_file = self.find_file(request.path_info) if self.autorefresh else self.files.get(request.path_info)
        if static_file is not None:
            response = await sync_to_async(self.serve, thread_sensitive=False)(static_file, request)
            if response.streaming and not response.is_async:
                # Django would read a file's synchronous iterator whole in a thread anyway,
                # warning on every file it serves so; the same, read off the event loop, in
                # chunks and without the warning.
                response.block_size = STATIC_CHUNK_BYTES
                response.streaming_content = _read_in_a_thread(iter(response.streaming_content))
            return response
        return await self.get_response(request)


STATIC_CHUNK_BYTES = 256 * 1024


async def _read_in_a_thread(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    read = sync_to_async(functools.partial(next, chunks, None), thread_sensitive=False)
    while (chunk := await read()) is not None:
        yield chunk
