"""A web site on a loopback port, with a route for each answer a link check meets (the
message checks' tests and bench/checks.py)."""
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Site:
    """A loopback web site: /ok 200, /missing 404, /moved → /ok, /loop → itself,
    /no-head (405 to HEAD, 200 to GET), /endless (a body that never ends), /slow (no
    answer until released)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.hits: Counter[tuple[str, str]] = Counter()
        self.released = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def answer(self) -> None:
                path = self.path.split("?")[0]
                site.hits[(self.command, path)] += 1
                if path == "/slow":
                    site.released.wait(30)
                    return self.send(200)
                if path == "/moved":
                    return self.send(302, Location="/ok")
                if path == "/loop":
                    return self.send(301, Location=f"/loop?{time.monotonic_ns()}")
                if path.startswith("/elsewhere"):
                    return self.send(307, Location=self.path.partition("to=")[2])
                if path == "/no-head" and self.command == "HEAD":
                    return self.send(405)
                if path == "/endless" and self.command == "HEAD":
                    return self.send(501)
                if path == "/endless":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.end_headers()
                    try:
                        while not site.released.is_set():
                            self.wfile.write(b"x" * 65536)
                    except OSError:
                        return
                    return
                self.send(200 if path in ("/ok", "/no-head") else 404)

            def send(self, status: int, **headers) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET = answer

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
