"""The MCP-wait benchmark's server (bench/mcp_wait.py): Relay's own ASGI application, as
`config.asgi` serves it, noting when each answer's last byte was handed to the server: the
time Relay took, apart from the client's. With `$BENCH_MEMORY`, it also says which library
holds the memory that held waits take (tracemalloc, snapshots on SIGUSR1).

An answer that carries a message (MCP's `wait_for_code` result, the API's list) adds a line
`<message id> <time.monotonic()>` to `$BENCH_ANSWERS.<pid>`.

    BENCH_ANSWERS=/tmp/answers gunicorn bench.timed_asgi -k core.serving.UvicornWorker
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


# --- where a held wait's memory goes (`mcp_wait --memory-profile`) -------------------------------
LIBRARIES = ("anyio", "mcp", "starlette", "uvicorn", "django", "rest_framework", "redis")
RELAY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library(filename: str) -> str | None:
    """"relay" for Relay's own code (not the benchmark's), one of LIBRARIES, or None."""
    if "/site-packages/" in filename:
        return next((library for library in LIBRARIES if f"/site-packages/{library}/" in filename), None)
    if filename.startswith(RELAY) and not filename.startswith(os.path.join(RELAY, "bench")):
        return "relay"
    return None


def _memory_by_library(before, after) -> dict[str, int]:
    """Bytes allocated between two snapshots and still held, by the library whose code asked
    for them (the innermost frame that is Relay's or one of LIBRARIES)."""
    held: dict[str, int] = {}
    for stat in after.compare_to(before, "traceback"):
        library = next(filter(None, (_library(frame.filename) for frame in reversed(stat.traceback))), "other")
        held[library] = held.get(library, 0) + stat.size_diff
    return held


if os.environ.get("BENCH_MEMORY"):
    import gc
    import json
    import signal
    import tracemalloc

    tracemalloc.start(12)
    _snapshots = []

    def _snapshot(*_) -> None:
        """SIGUSR1: a snapshot (then `$BENCH_MEMORY.<pid>.first` is written); at the second,
        what was allocated since the first, by library, to `$BENCH_MEMORY.<pid>`."""
        gc.collect()  # what is already garbage is not counted as held, nor as freed later
        _snapshots.append(tracemalloc.take_snapshot())
        if len(_snapshots) == 1:
            open(f"{os.environ['BENCH_MEMORY']}.{os.getpid()}.first", "w").close()
        else:
            figures = f"{os.environ['BENCH_MEMORY']}.{os.getpid()}"
            with open(figures + ".part", "w") as out:
                json.dump(_memory_by_library(*_snapshots), out)
            os.replace(figures + ".part", figures)  # whole when it appears
            _snapshots.clear()

    signal.signal(signal.SIGUSR1, _snapshot)
