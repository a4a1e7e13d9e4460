"""The MCP-wait benchmark's server (bench/mcp_wait.py): Relay's own ASGI application, as
`config.asgi` serves it, noting when each answer's last byte was handed to the server: the
time Relay took, apart from the client's.

An answer that carries a message (MCP's `wait_for_code` result, the API's list) adds a line
`<message id> <time.monotonic()>` to `$BENCH_ANSWERS.<pid>`.

    BENCH_ANSWERS=/tmp/answers gunicorn bench.timed_asgi -k uvicorn_worker.UvicornWorker
"""
import os
import re
import time

from config.asgi import application as relay

MESSAGE = re.compile(rb'"structuredContent":\{[^}]*"message_id":(\d+)|"results":\s*\[\{"id":\s*(\d+)')


async def application(scope, receive, send):
    if scope["type"] != "http":
        return await relay(scope, receive, send)
    body = []

    async def timed(message):
        await send(message)
        if message["type"] == "http.response.body":
            body.append(message.get("body", b""))
            if not message.get("more_body"):
                found = MESSAGE.search(b"".join(body))
                if found:
                    with open(f"{os.environ['BENCH_ANSWERS']}.{os.getpid()}", "a") as answers:
                        answers.write(f"{(found.group(1) or found.group(2)).decode()} {time.monotonic()}\n")

    await relay(scope, receive, timed)
