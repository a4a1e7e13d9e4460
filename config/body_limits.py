"""How large a request body each route takes, enforced before Django reads it.

Only the routes that carry attachments (a send, a reply, and the MCP endpoint, whose
send_message takes them too) take a body as large as a message may be; every other route
takes BODY_LIMIT, so that no client makes the web process receive and parse megabytes
of JSON for a route that needs a few hundred bytes. A body over its route's limit is a
413 before a byte of it is read (by its Content-Length) or as soon as it passes the
limit (a chunked body, which Django would otherwise read whole)."""
import json
import re

from django.conf import settings

from api.errors import MESSAGES, error_body

BODY_LIMIT = 1024 * 1024
# Routes whose bodies may carry attachments: up to DATA_UPLOAD_MAX_MEMORY_SIZE.
LARGE_BODIES = re.compile(r"^(/api/v1/mailboxes/[^/]+/messages(/[^/]+/reply)?|/mcp)/?$")


def limit_for(path: str) -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE if LARGE_BODIES.match(path) else BODY_LIMIT


async def _too_large(send, limit: int) -> None:
    body = json.dumps(error_body(413, f"{MESSAGES[413]} This route takes at most {limit} bytes.")).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def with_body_limits(app):
    async def limited(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        limit = limit_for(scope.get("path", ""))
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > limit:
                return await _too_large(send, limit)
            return await app(scope, receive, send)
        # No length given (chunked): read up to the limit, then hand what was read on.
        received, size = [], 0
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > limit:
                return await _too_large(send, limit)
            if not message.get("more_body"):
                break

        async def replay():
            return received.pop(0) if received else await receive()

        return await app(scope, replay, send)

    return limited
