"""Relay's calls to addresses a client named (SECURITY.md, "Webhooks" and "Outside calls
that hold Relay's threads"): a webhook delivery, an agent's client ID document, a link
check's request, each through `exchange`. Only public addresses, the checked one pinned,
one wall-clock deadline for the whole exchange, no redirect followed, no proxy, no more of
the body read than the caller asks for."""
import ipaddress
import os
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
import urllib3
from django.conf import settings
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

MAX_BODY = 4096
# Connecting gives up sooner than the whole call may take: an address that does not answer
# at all is known soon enough.
CONNECT_SECONDS = 5
# IPv6 ranges whose last 32 bits are an IPv4 address a router may reach.
CARRIES_IPV4_LOW_BITS = [ipaddress.ip_network(net) for net in
                         ("::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96")]
# NAT64's local-use prefix places the IPv4 address where the operator chose: never public.
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")
# Deprecated site-local addresses, which Python does not count as private.
SITE_LOCAL = ipaddress.ip_network("fec0::/10")


class PrivateAddress(ValueError):
    pass


class DeliveryTimedOut(Exception):
    pass


class TransportFailed(Exception):
    """The call failed below HTTP: refused, reset, TLS, a broken answer."""


# --- the address check ----------------------------------------------------------------------
def carried_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries, if any: in its low 32 bits (IPv4-compatible,
    mapped, translated, NAT64), after 2002: (6to4), or as a Teredo client."""
    if address.teredo is not None:
        return address.teredo[1]
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in CARRIES_IPV4_LOW_BITS):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether a webhook may be delivered to `address`: the one rule, at creation and at
    every delivery."""
    if address.version == 6:
        if address in NAT64_LOCAL_USE or address in SITE_LOCAL:
            return False
        embedded = carried_ipv4(address)
        if embedded is not None:
            return public(embedded)
    return address.is_global and not address.is_multicast


def resolve_checked(url: str, *, allow_private: bool | None = None) -> str:
    """The address to connect to for `url`, resolved once and checked (PrivateAddress); the
    error never says what the name resolved to. `allow_private` defaults to the webhooks' setting."""
    if allow_private is None:
        allow_private = settings.RELAY_WEBHOOK_ALLOW_PRIVATE
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrivateAddress("The URL must be http:// or https:// with a host.")
    refused = PrivateAddress(f"{parts.hostname} does not resolve to a public address.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError):
        raise refused from None
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not addresses or not (allow_private or all(public(a) for a in addresses)):
        raise refused
    return str(addresses[0])


def check_url(url: str) -> None:
    """At creation: the URL's form, and (unless RELAY_WEBHOOK_ALLOW_PRIVATE, where a name
    need not resolve yet) its addresses. Every delivery checks again."""
    parts = urlsplit(url)
    if settings.RELAY_WEBHOOK_ALLOW_PRIVATE and parts.scheme in ("http", "https") and parts.hostname:
        return
    resolve_checked(url)


# --- one deadline for the whole exchange ---------------------------------------------------------
_watched = threading.local()


class Deadline:
    """Cuts a call's connections off when `seconds` pass, from the TCP connection's first
    byte to the body's last. A socket timeout bounds each read alone, so a server sending a
    byte a second would hold the call for as long as it likes. http.client drops its
    connection's socket once the headers of an answer without Content-Length are read
    (the answer keeps reading it), so the deadline holds a duplicate of each socket's
    descriptor, which stays valid whoever forgets the original: shutting it down ends
    the TCP connection under a TLS handshake, the headers or the body alike."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._cut = False
        self._ends = float("inf")  # set when the clock starts, on entering
        self._held: list[socket.socket] = []
        self._descriptors: set[int] = set()  # those held: a TLS socket keeps its TCP one's
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._cut_off)
        self._timer.daemon = True

    def hold(self, sock: socket.socket) -> None:
        """Put `sock` (plain or TLS) under the deadline; one past it is cut off at once."""
        with self._lock:
            if sock.fileno() in self._descriptors:
                return
            self._descriptors.add(sock.fileno())
            held = socket.socket(sock.family, sock.type, sock.proto, fileno=os.dup(sock.fileno()))
            self._held.append(held)
            if self.passed:
                _shut(held)

    @property
    def passed(self) -> bool:
        """Whether the time is up: by the clock as well as by the timer, which on a busy
        machine may fire after a socket's own timeout of the same length has ended a read
        (that is a timeout all the same, not a failed transport)."""
        return self._cut or time.monotonic() >= self._ends

    def _cut_off(self) -> None:
        with self._lock:
            self._cut = True
            for held in self._held:
                _shut(held)

    def __enter__(self) -> "Deadline":
        _watched.deadline = self
        self._ends = time.monotonic() + self.seconds
        self._timer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._timer.cancel()
        _watched.deadline = None
        with self._lock:
            for held in self._held:
                held.close()  # the duplicate only: the pool may keep the connection itself
            self._held.clear()
            self._descriptors.clear()


def _shut(sock: socket.socket) -> None:
    try:
        # A reader blocked in recv (also TLS's, which reads the same TCP connection) gets
        # end-of-file at once.
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _hold(sock: socket.socket | None) -> None:
    deadline = getattr(_watched, "deadline", None)
    if deadline is not None and sock is not None:
        deadline.hold(sock)


class _Watched:
    """Puts a connection's socket under the current Deadline when it is made (before any
    TLS handshake) or, for a connection the pool kept, when a request is sent on it."""

    def _new_conn(self):
        sock = super()._new_conn()
        _hold(sock)
        return sock

    def request(self, *args, **kwargs):
        _hold(self.sock)  # one kept from an earlier call is not yet under this deadline
        return super().request(*args, **kwargs)


class _WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class PinnedAdapter(HTTPAdapter):
    """Connects to the address a request carries as `relay_address` (the one checked), with
    the URL's host name kept for the Host header, SNI and the certificate check."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}

    def build_connection_pool_key_attributes(self, request, verify, cert=None):
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        address = getattr(request, "relay_address", None)
        if address:
            hostname = host_params["host"]
            host_params = {**host_params, "host": address}
            if host_params["scheme"] == "https":
                pool_kwargs = {**pool_kwargs, "server_hostname": hostname, "assert_hostname": hostname}
        return host_params, pool_kwargs


def pinned_session() -> requests.Session:
    """A session that connects only to the address each request carries, with no proxy."""
    session = requests.Session()
    session.trust_env = False
    adapter = PinnedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


_sessions = threading.local()


def _http() -> requests.Session:
    """One session per thread (a requests session is not safe to share between threads), so
    connections to a receiver's address are reused by the next call."""
    session = getattr(_sessions, "session", None)
    if session is None:
        session = _sessions.session = pinned_session()
    return session


# --- the one client ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    status: int
    headers: CaseInsensitiveDict  # looked up in any case, as HTTP's field names are
    body: bytes  # at most the `read` bytes asked for; none by default
    complete: bool  # False: the deadline cut the body short


def exchange(method: str, url: str, *, seconds: float, headers: dict | None = None, body: bytes | None = None,
             read: int = 0, allow_private: bool | None = None) -> Answer:
    """One HTTP request to `url` and its answer, under every guard above: the address checked
    and pinned, no proxy, no redirect followed, and all of it (connecting, TLS, the
    headers, `read` bytes of the body at most) within `seconds` of wall-clock time,
    whatever the server sends and however slowly. `allow_private` defaults to the webhooks'
    setting. Raises PrivateAddress, DeliveryTimedOut (no headers in time) or TransportFailed."""
    if seconds <= 0:
        raise DeliveryTimedOut("no time left for the call")
    address = resolve_checked(url, allow_private=allow_private)
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    session = _http()
    request = session.prepare_request(requests.Request(method, url, data=body, headers={**(headers or {}),
                                                                                         "Host": netloc}))
    request.relay_address = address
    with Deadline(seconds) as deadline:
        try:
            response = session.send(request, allow_redirects=False, stream=True,
                                    timeout=(min(CONNECT_SECONDS, seconds), seconds),
                                    verify=settings.RELAY_WEBHOOK_CA_FILE or True)
            with response:
                status, answer_headers = response.status_code, CaseInsensitiveDict(response.headers)
                try:
                    content = response.raw.read(read) if read else b""
                except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
                    if not deadline.passed:
                        raise
                    content = b""
                # Read before the deadline is left: a timer firing after the last byte, before
                # it is cancelled, must not make a whole body look cut off.
                cut_off = bool(read) and deadline.passed
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            if deadline.passed:
                raise DeliveryTimedOut(f"no complete answer within {seconds:g} s") from None
            raise TransportFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
    # A body cut off by the deadline ends like a complete one without Content-Length: only
    # the deadline tells them apart.
    return Answer(status=status, headers=answer_headers, body=content, complete=not cut_off)


def post(url: str, body: bytes, headers: dict) -> int:
    """A webhook delivery: POST `body` to `url` within RELAY_WEBHOOK_TIMEOUT_SECONDS; the
    receiver's status code (a 2xx counts even when the rest of its answer came too late).
    The answer's body is drained up to a bound, never kept. Raises PrivateAddress,
    DeliveryTimedOut or TransportFailed."""
    seconds = settings.RELAY_WEBHOOK_TIMEOUT_SECONDS
    answer = exchange("POST", url, seconds=seconds, headers=headers, body=body, read=MAX_BODY)
    if not answer.complete and not 200 <= answer.status < 300:
        raise DeliveryTimedOut(f"no complete answer within {seconds} s")
    return answer.status


def get_document(url: str, *, max_bytes: int, seconds: float) -> Answer:
    """GET a JSON document (an agent's client ID metadata document), its body whole or up to
    `max_bytes` + 1 bytes, so that the caller sees one that is too large. Raises
    PrivateAddress, DeliveryTimedOut (also for a body not whole in time) or TransportFailed."""
    answer = exchange("GET", url, seconds=seconds, read=max_bytes + 1,
                      headers={"Accept": "application/json, application/*+json"})
    if not answer.complete:
        raise DeliveryTimedOut(f"no complete answer within {seconds:g} s")
    return answer
