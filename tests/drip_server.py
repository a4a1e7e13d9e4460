"""Servers that hold a caller without ever refusing it, on loopback ports: what a hostile
webhook receiver, client ID document or linked site does to hold Relay's threads
(the outbound client's tests, tests/webhooks/test_deadline.py, and the web process's,
tests/api/test_outside_calls.py)."""
import socket
import ssl
import threading


class LoopbackServer:
    """A TCP server on a free loopback port that hands each connection to `accepted`,
    until `stop`."""

    def __init__(self, backlog: int = 16) -> None:
        self.stopped = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted(connection)

    def accepted(self, connection: socket.socket) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


class DripServer(LoopbackServer):
    """Answers each request with the headers of a 200 without Content-Length (so the answer
    ends when the connection does), then one byte of body every `interval` seconds, for
    `lasts` seconds. With `tls` (a server SSLContext), over TLS; with `whole`, that body is
    sent at once instead, its length given. The headers' names are in lower case, as
    HTTP/2 and many servers send them."""

    def __init__(self, *, tls: ssl.SSLContext | None = None, interval: float = 1.0, lasts: float = 60.0,
                 whole: bytes | None = None) -> None:
        self.tls, self.interval, self.whole = tls, interval, whole
        self.drips = int(lasts / interval)
        self.connections = 0
        super().__init__()

    def accepted(self, connection: socket.socket) -> None:
        self.connections += 1
        threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        try:
            connection.settimeout(10)
            if self.tls is not None:
                connection = self.tls.wrap_socket(connection, server_side=True)
            connection.recv(65536)  # the request
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\nconnection: close\r\n"
            if self.whole is not None:
                connection.sendall(head + b"content-length: %d\r\n\r\n" % len(self.whole) + self.whole)
                return
            connection.sendall(head + b"\r\n")
            for _ in range(self.drips):
                if self.stopped.wait(self.interval):
                    return
                connection.sendall(b" ")
        except OSError:
            pass
        finally:
            connection.close()


class SilentServer(LoopbackServer):
    """Accepts every connection and never sends a byte (a spamd that hangs)."""

    def __init__(self) -> None:
        self.held: list[socket.socket] = []
        super().__init__(backlog=64)

    def accepted(self, connection: socket.socket) -> None:
        self.held.append(connection)

    def stop(self) -> None:
        super().stop()
        for connection in self.held:
            connection.close()


def server_tls(certificates) -> ssl.SSLContext:
    """A server context with the certificate the suite's CA signed for localhost (the
    `certificates` fixture's folder)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    return context
