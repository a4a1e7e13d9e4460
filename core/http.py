"""Relay's calls to addresses a client named (SECURITY.md, "Webhooks"): a webhook delivery,
an agent's client ID document, a link check's request. Only public addresses, the checked
one pinned, one deadline, no redirect followed, no proxy, no kept body."""
import ipaddress
import socket
import threading
from urllib.parse import urlsplit

import requests
import urllib3
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

MAX_BODY = 4096
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


# --- one deadline for the whole call ------------------------------------------------------------
_watched = threading.local()


class Deadline:
    """Cut the connections off when `seconds` pass: a socket timeout bounds only each read."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.connections: list[HTTPConnection] = []
        self.passed = False
        self._timer = threading.Timer(seconds, self._cut_off)
        self._timer.daemon = True

    def _cut_off(self) -> None:
        self.passed = True
        for connection in self.connections:
            sock = connection.sock
            if sock is not None:
                try:
                    # The plain socket's shutdown, also under TLS: the reader blocked in
                    # recv gets end-of-file at once.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass

    def __enter__(self) -> "Deadline":
        _watched.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._timer.cancel()
        _watched.deadline = None


def _watch(connection: HTTPConnection) -> None:
    deadline = getattr(_watched, "deadline", None)
    if deadline is not None and connection not in deadline.connections:
        deadline.connections.append(connection)


class _Watched:
    """Puts a connection under the current Deadline whenever it connects or sends."""

    def connect(self):
        _watch(self)
        return super().connect()

    def request(self, *args, **kwargs):
        _watch(self)
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


_session: requests.Session | None = None


def pinned_session() -> requests.Session:
    """A session that connects only to the address each request carries, with no proxy."""
    session = requests.Session()
    session.trust_env = False
    adapter = PinnedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _http() -> requests.Session:
    """One session per worker process, so connections to a receiver's address are reused."""
    global _session
    if _session is None:
        _session = pinned_session()
    return _session


def post(url: str, body: bytes, headers: dict) -> int:
    """POST `body` to `url` under every guard above; the receiver's status code. Raises
    PrivateAddress, DeliveryTimedOut or TransportFailed."""
    address = resolve_checked(url)
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    session = _http()
    request = session.prepare_request(requests.Request("POST", url, data=body, headers={**headers, "Host": netloc}))
    request.relay_address = address
    seconds = settings.RELAY_WEBHOOK_TIMEOUT_SECONDS
    with Deadline(seconds) as deadline:
        try:
            response = session.send(request, allow_redirects=False, stream=True, timeout=(min(5, seconds), seconds))
            with response:
                status_code = response.status_code
                response.raw.read(MAX_BODY)  # drained up to a bound, never kept
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            if deadline.passed:
                raise DeliveryTimedOut(f"no complete answer within {seconds} s") from None
            raise TransportFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
    if deadline.passed and not 200 <= status_code < 300:
        raise DeliveryTimedOut(f"no complete answer within {seconds} s")
    return status_code


def get_document(url: str, *, max_bytes: int, seconds: float) -> tuple[int, dict, bytes]:
    """GET `url` under the same guards as a delivery (its address checked and pinned, one
    deadline, no redirect, no proxy): (status, headers, at most `max_bytes` + 1 bytes of
    body). Raises PrivateAddress, DeliveryTimedOut or TransportFailed."""
    address = resolve_checked(url)
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    session = _http()
    request = session.prepare_request(requests.Request("GET", url, headers={
        "Host": netloc, "Accept": "application/json, application/*+json"}))
    request.relay_address = address
    with Deadline(seconds) as deadline:
        try:
            response = session.send(request, allow_redirects=False, stream=True, timeout=(min(5, seconds), seconds),
                                    verify=settings.RELAY_WEBHOOK_CA_FILE or True)
            with response:
                return response.status_code, dict(response.headers), response.raw.read(max_bytes + 1)
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            if deadline.passed:
                raise DeliveryTimedOut(f"no complete answer within {seconds} s") from None
            raise TransportFailed(f"{type(exc).__name__}: {exc}"[:300]) from None


def probe(session: requests.Session, url: str, method: str, *, allow_private: bool, seconds: float) -> tuple[int, str]:
    """One HEAD or GET of `url`, its address checked and pinned, no redirect followed and
    no byte of the body read: (status, Location or ""). Raises PrivateAddress, or what
    requests raises; the caller holds the Deadline."""
    address = resolve_checked(url, allow_private=allow_private)
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    request = session.prepare_request(requests.Request(method, url, headers={
        "Host": netloc, "User-Agent": "Relay link check", "Accept": "*/*"}))
    request.relay_address = address
    response = session.send(request, allow_redirects=False, stream=True, timeout=(min(5, seconds), seconds),
                            verify=settings.RELAY_WEBHOOK_CA_FILE or True)
    with response:
        return response.status_code, response.headers.get("Location", "")
