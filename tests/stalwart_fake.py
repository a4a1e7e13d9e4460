"""A Stalwart stand-in: a real HTTP server speaking the JMAP management calls Relay uses
and the JMAP mail calls its reader uses (docs/architecture.md), with failures that
tests switch on.

Stalwart itself cannot run here; this is the one double the suite allows. It keeps
accounts and their mail in memory, enforces Stalwart's limit of 4 concurrent requests,
and records every destroy so tests can check what was deprovisioned, when, and how
often. `deliver()` puts a message into an account's inbox, as Stalwart's SMTP would.
"""
import datetime
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "test-token"
# The authserv-id Relay is told the mail server writes (RELAY_AUTHSERV_ID).
MAIL_SERVER_ID = "mx.mailserver.test"
MAX_CONCURRENT = 4

# Failure kinds a test can switch on.
HTTP_503 = "503"
TIMEOUT = "timeout"
RATE_LIMITED = "429"
CONCURRENCY = "maxConcurrentRequests"
UNAUTHORIZED = "401"
FORBIDDEN_IN_BODY = "forbidden"  # HTTP 200 with a JMAP method error inside
NOT_FOUND = "notFound"  # destroy answers notDestroyed/notFound
TRANSIENT_KINDS = (HTTP_503, TIMEOUT, RATE_LIMITED, CONCURRENCY)


@dataclass
class Failure:
    kind: str
    remaining: int | None  # None: always


@dataclass
class Destroy:
    at: float  # time.time()
    name: str
    account_id: str


@dataclass
class FakeStalwart:
    domains: dict = field(default_factory=lambda: {"d1": "relay.localhost", "d2": "other.localhost"})
    latency: float = 0.0
    timeout_sleep: float = 2.0
    # A slow server: discovery answers after this long, and an account create takes this
    # long to take effect, whether or not the client is still there to hear the answer.
    discovery_delay: float = 0.0
    create_delay: float = 0.0
    accounts: dict = field(default_factory=dict)  # id -> {"name", "domainId"}
    destroys: list = field(default_factory=list)  # successful destroys
    # account id -> {"state": int, "emails": [{"id", "blobId", "receivedAt", "raw", "state"}]}
    mail: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)  # (method, arguments)
    failures_by_name: dict = field(default_factory=dict)  # local part -> Failure (destroy only)
    failure_all: Failure | None = None  # any request
    in_flight: int = 0
    max_in_flight: int = 0
    discoveries_started: int = 0
    creates_started: int = 0

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self._next_id = 1
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeStalwart":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        with self.lock:
            self.accounts.clear()
            self.mail.clear()
            self.destroys.clear()
            self.calls.clear()
            self.failures_by_name.clear()
            self.failure_all = None
            self.latency = 0.0
            self.discovery_delay = 0.0
            self.create_delay = 0.0
            self.max_in_flight = 0
            # Stalwart's per-minute limit, enforced when set (requests in a sliding minute),
            # and how many calls either limit refused.
            self.per_minute = None
            self.started_at: list[float] = []
            self.refused_over_limit = 0
            self.requests = 0  # every request, answered or refused
            self.discoveries_started = self.creates_started = 0

    # --- test controls --------------------------------------------------------------------
    def add_account(self, name: str, domain_id: str = "d1", description: str = "Relay disposable mailbox ") -> str:
        """An account, as Relay makes them (with its mark) unless given another description
        (someone else's account)."""
        with self.lock:
            account_id = f"a{self._next_id}"
            self._next_id += 1
            self.accounts[account_id] = {"name": name, "domainId": domain_id, "description": description}
            return account_id

    def deliver(self, account_id: str, raw: bytes, received_at: datetime.datetime | None = None) -> str:
        """A message delivered into the account's inbox, as Stalwart's SMTP would; its id."""
        with self.lock:
            box = self.mail.setdefault(account_id, {"state": 0, "emails": []})
            box["state"] += 1
            email_id = f"e{account_id}-{box['state']}"
            received = (received_at or datetime.datetime.now(datetime.timezone.utc)).replace(microsecond=0)
            box["emails"].append({"id": email_id, "blobId": f"b{email_id}", "raw": raw, "state": box["state"],
                                  "receivedAt": received.isoformat().replace("+00:00", "Z")})
            return email_id

    def fail(self, kind: str, *, name: str | None = None, times: int | None = None) -> None:
        with self.lock:
            if name is None:
                self.failure_all = Failure(kind, times)
            else:
                self.failures_by_name[name] = Failure(kind, times)

    def destroy_calls(self, name: str | None = None) -> list:
        with self.lock:
            return [args for method, args in self.calls if method == "destroy" and (name is None or args == name)]

    def destroyed_names(self) -> list:
        with self.lock:
            return [d.name for d in self.destroys]

    # --- protocol -------------------------------------------------------------------------
    def _take(self, failure: Failure | None) -> str | None:
        if failure is None or failure.remaining == 0:
            return None
        if failure.remaining is not None:
            failure.remaining -= 1
        return failure.kind

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # One buffered write per response, and no Nagle: otherwise headers and body
            # go out as two segments and delayed ACKs add 40 ms to every call.
            wbufsize = -1
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (its timeout): that is the point

            def _begin(self) -> str | None:
                """Shared checks; returns a failure kind to act on, if any."""
                with fake.lock:
                    fake.requests += 1
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    over_limit = fake.in_flight > MAX_CONCURRENT
                    over_rate = False
                    if fake.per_minute is not None:
                        now = time.monotonic()
                        fake.started_at = [t for t in fake.started_at if t > now - 60]
                        over_rate = len(fake.started_at) >= fake.per_minute
                        if not over_rate:
                            fake.started_at.append(now)
                    if over_limit or over_rate:
                        fake.refused_over_limit += 1
                    kind = fake._take(fake.failure_all)
                if fake.latency:
                    time.sleep(fake.latency)
                if over_limit:
                    return CONCURRENCY
                if over_rate:
                    return RATE_LIMITED
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return UNAUTHORIZED
                return kind

            def _fail(self, kind: str) -> bool:
                if kind == HTTP_503:
                    self._send(503, {"detail": "unavailable"})
                elif kind == RATE_LIMITED:
                    self._send(429, {"type": "about:blank", "status": 429, "detail": "Too many requests"})
                elif kind == CONCURRENCY:
                    self._send(400, {"type": "urn:ietf:params:jmap:error:limit", "limit": "maxConcurrentRequests",
                                     "status": 400, "detail": "Too many concurrent requests"})
                elif kind == UNAUTHORIZED:
                    self._send(401, {"type": "about:blank", "status": 401, "detail": "Unauthorized"})
                elif kind == TIMEOUT:
                    time.sleep(fake.timeout_sleep)
                    self._send(503, {"detail": "too late"})
                else:
                    return False
                return True

            def do_GET(self) -> None:
                try:
                    kind = self._begin()
                    if kind and self._fail(kind):
                        return
                    if self.path.startswith("/jmap/download/"):
                        self._download(self.path.split("?")[0].split("/"))
                        return
                    if self.path != "/.well-known/jmap":
                        self._send(404, {"type": "about:blank", "status": 404})
                        return
                    with fake.lock:
                        fake.discoveries_started += 1
                    time.sleep(fake.discovery_delay)
                    self._send(200, {"apiUrl": "/jmap/", "downloadUrl": "/jmap/download/{accountId}/{blobId}/{name}",
                                     "capabilities": {"urn:ietf:params:jmap:core": {"maxCallsInRequest": 16},
                                                      "urn:ietf:params:jmap:mail": {}, "urn:stalwart:jmap": {}}})
                finally:
                    with fake.lock:
                        fake.in_flight -= 1

            def do_POST(self) -> None:
                try:
                    length = int(self.headers.get("Content-Length", 0))
                    body = json.loads(self.rfile.read(length) or b"{}")
                    kind = self._begin()
                    if kind and self._fail(kind):
                        return
                    if any(call[0] == "x:Account/set" and call[1].get("create") for call in body["methodCalls"]):
                        with fake.lock:
                            fake.creates_started += 1
                        time.sleep(fake.create_delay)
                    responses = [self._method(name, args, call_id, kind) for name, args, call_id in body["methodCalls"]]
                    for response in responses:
                        if isinstance(response, tuple):
                            self._fail(response[1])
                            return
                    self._send(200, {"methodResponses": responses, "sessionState": "0"})
                finally:
                    with fake.lock:
                        fake.in_flight -= 1

            def _download(self, parts: list[str]) -> None:
                account_id, blob_id = parts[3], parts[4]
                with fake.lock:
                    found = [e["raw"] for e in fake.mail.get(account_id, {}).get("emails", []) if e["blobId"] == blob_id]
                if not found:
                    self._send(404, {"type": "about:blank", "status": 404})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "message/rfc822")
                self.send_header("Content-Length", str(len(found[0])))
                self.end_headers()
                self.wfile.write(found[0])

            def _mail_method(self, name: str, args: dict, call_id: str):
                """The JMAP mail calls the reader makes (RFC 8621), on one inbox per account."""
                account_id = args.get("accountId")
                if account_id not in fake.accounts:
                    return ["error", {"type": "accountNotFound"}, call_id]
                box = fake.mail.setdefault(account_id, {"state": 0, "emails": []})
                by_id = {e["id"]: e for e in box["emails"]}
                if name == "Mailbox/query":
                    return [name, {"accountId": account_id, "ids": ["inbox"]}, call_id]
                if name == "Email/query":
                    return [name, {"accountId": account_id, "ids": [e["id"] for e in box["emails"]]}, call_id]
                if name == "Email/changes":
                    since = args.get("sinceState", "")
                    if not since.isdigit() or int(since) > box["state"]:
                        return ["error", {"type": "cannotCalculateChanges"}, call_id]
                    created = [e["id"] for e in box["emails"] if e["state"] > int(since)]
                    limit = args.get("maxChanges") or len(created)
                    more = len(created) > limit
                    new_state = by_id[created[limit - 1]]["state"] if more else box["state"]
                    return [name, {"accountId": account_id, "oldState": since, "newState": str(new_state),
                                   "hasMoreChanges": more, "created": created[:limit], "updated": [],
                                   "destroyed": []}, call_id]
                listed = [{"id": i, "blobId": by_id[i]["blobId"], "receivedAt": by_id[i]["receivedAt"],
                           "size": len(by_id[i]["raw"]), "mailboxIds": {"inbox": True}}
                          for i in args.get("ids") or [] if i in by_id]
                return [name, {"accountId": account_id, "state": str(box["state"]), "list": listed,
                               "notFound": [i for i in args.get("ids") or [] if i not in by_id]}, call_id]

            def _method(self, name: str, args: dict, call_id: str, kind: str | None):
                if kind == FORBIDDEN_IN_BODY:
                    return ["error", {"type": "forbidden", "description": "not allowed"}, call_id]
                with fake.lock:
                    if name in ("Email/get", "Email/changes", "Email/query", "Mailbox/query"):
                        return self._mail_method(name, args, call_id)
                    if name == "x:Domain/query":
                        wanted = args.get("filter", {}).get("name")
                        return [name, {"ids": [i for i, d in fake.domains.items() if d == wanted]}, call_id]
                    if name == "x:Account/query":
                        f = args.get("filter", {})
                        ids = sorted((i for i, a in fake.accounts.items() if a["domainId"] == f.get("domainId")
                                      and ("name" not in f or a["name"] == f["name"])), key=lambda i: int(i[1:]))
                        position, limit = int(args.get("position", 0)), args.get("limit")
                        page = ids[position:position + limit] if limit is not None else ids[position:]
                        if limit is not None:
                            fake.calls.append(("query page", len(page)))
                        return [name, {"ids": page, "position": position, "total": len(ids)}, call_id]
                    if name == "x:Account/get":
                        found = [{"id": i, **fake.accounts[i]} for i in args.get("ids") or [] if i in fake.accounts]
                        return [name, {"list": found, "notFound": [i for i in args.get("ids") or []
                                                                    if i not in fake.accounts]}, call_id]
                    if name != "x:Account/set":
                        return ["error", {"type": "unknownMethod"}, call_id]
                    result = {}
                    for key, account in (args.get("create") or {}).items():
                        if account.get("domainId") not in fake.domains:
                            result.setdefault("notCreated", {})[key] = {"type": "invalidProperties"}
                        elif any(a["name"] == account["name"] and a["domainId"] == account["domainId"]
                                 for a in fake.accounts.values()):
                            result.setdefault("notCreated", {})[key] = {"type": "alreadyExists"}
                        else:
                            account_id = f"a{fake._next_id}"
                            fake._next_id += 1
                            fake.accounts[account_id] = {"name": account["name"], "domainId": account["domainId"],
                                                         "description": account.get("description", "")}
                            result.setdefault("created", {})[key] = {"id": account_id}
                    for account_id in args.get("destroy") or []:
                        account = fake.accounts.get(account_id)
                        account_name = account["name"] if account else None
                        fake.calls.append(("destroy", account_name))
                        failure = fake._take(fake.failures_by_name.get(account_name)) if account_name else None
                        if failure in TRANSIENT_KINDS or failure == UNAUTHORIZED:
                            # Answered for the whole request, outside the lock.
                            return ("fail", failure)
                        if failure == FORBIDDEN_IN_BODY:
                            return ["error", {"type": "forbidden", "description": "not allowed"}, call_id]
                        if account is None or failure == NOT_FOUND:
                            result.setdefault("notDestroyed", {})[account_id] = {"type": "notFound"}
                            continue
                        del fake.accounts[account_id]
                        fake.destroys.append(Destroy(time.time(), account_name, account_id))
                        result.setdefault("destroyed", []).append(account_id)
                    return [name, result, call_id]

        return Handler
