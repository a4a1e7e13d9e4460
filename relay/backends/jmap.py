"""A JMAP client (RFC 8620/8621) for Cyrus and Stalwart: session, batched method calls, blobs,
every call timed out; a method's own error comes back as its answer."""
import threading
from contextlib import nullcontext
from urllib.parse import quote

import requests

from accounts.inputs import whole_number_or_none
from relay.backends import PermanentBackendError, TransientBackendError
from relay.metrics import MAILSERVER_REQUESTS

USING = ["urn:ietf:params:jmap:core", "urn:ietf:params:jmap:mail"]
CORE = "urn:ietf:params:jmap:core"
# Request-level problems (RFC 8620 §3.6.1) a later request may not meet.
TRANSIENT_LIMITS = {"maxConcurrentRequests", "maxConcurrentUpload", "maxRequestsPerMinute"}


class JmapClient:
    """One JMAP server, as one user (HTTP Basic, or a Bearer token). Thread-safe: one
    instance per process serves every thread (its session is read once)."""

    def __init__(self, *, base_url: str, name: str, timeout: tuple[float, float], basic: tuple[str, str] | None = None,
                 token: str | None = None, slot=None) -> None:
        self.base_url, self.name, self.timeout = base_url.rstrip("/"), name, timeout
        self.http = requests.Session()
        if basic:
            self.http.auth = basic
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"
        self.http.headers["Accept"] = "application/json"
        # Each request may first take a slot of a shared limit (Stalwart's; relay/backends/limiter.py).
        self.slot = slot or nullcontext
        # Reentrant: a failed request forgets the session, also while it is being read.
        self._lock = threading.RLock()
        self._session: dict | None = None

    # --- the session ------------------------------------------------------------------------
    def session(self) -> dict:
        """The JMAP session (`/.well-known/jmap`, following its redirect), read once."""
        with self._lock:
            if self._session is None:
                session = self._json(self._send("GET", f"{self.base_url}/.well-known/jmap"))
                if not isinstance(session.get("apiUrl"), str) or not session["apiUrl"]:
                    raise TransientBackendError(f"{self.name}'s JMAP session has no apiUrl")
                self._session = session
            return self._session

    def max_calls(self) -> int:
        """How many method calls one request may carry (the server's maxCallsInRequest)."""
        limit = ((self.session().get("capabilities") or {}).get(CORE) or {}).get("maxCallsInRequest")
        return limit if isinstance(limit, int) and limit > 0 else 16

    def forget_session(self) -> None:
        """Read the session again at the next call (after the server restarted, say)."""
        with self._lock:
            self._session = None

    # --- calls ------------------------------------------------------------------------------
    def call(self, method_calls: list[list], *, using: list[str] = USING) -> list[list]:
        """Send `method_calls` ([name, arguments, call id] each) in one request; their
        answers, in order. A method's own error is its answer, `["error", {...}, id]`."""
        api_url = requests.compat.urljoin(self.base_url + "/", self.session()["apiUrl"])
        MAILSERVER_REQUESTS.labels("jmap").inc()
        answer = self._json(self._send("POST", api_url, json={"using": using, "methodCalls": method_calls}))
        responses = answer.get("methodResponses")
        if not isinstance(responses, list) or not all(isinstance(item, list) and len(item) == 3 for item in responses):
            raise TransientBackendError(f"{self.name} answered without methodResponses")
        return responses

    def download(self, account_id: str, blob_id: str) -> bytes:
        """A blob's bytes, as the server holds them (for an email: the message as delivered)."""
        template = self.session().get("downloadUrl")
        if not isinstance(template, str):
            raise TransientBackendError(f"{self.name}'s JMAP session has no downloadUrl")
        path = (template.replace("{accountId}", quote(account_id, safe="")).replace("{blobId}", quote(blob_id, safe=""))
                .replace("{name}", "message.eml").replace("{type}", quote("message/rfc822", safe="")))
        MAILSERVER_REQUESTS.labels("blob").inc()
        return self._send("GET", requests.compat.urljoin(self.base_url + "/", path)).content

    # --- transport ----------------------------------------------------------------------------
    def _send(self, verb: str, url: str, **kwargs) -> requests.Response:
        try:
            with self.slot():
                response = self.http.request(verb, url, timeout=self.timeout, **kwargs)
        except requests.Timeout as exc:
            raise TransientBackendError(f"{self.name} timed out: {exc}") from exc
        except requests.RequestException as exc:
            self.forget_session()
            raise TransientBackendError(f"{self.name} unreachable: {exc}") from exc
        status = response.status_code
        if status in (401, 403):
            raise PermanentBackendError(f"{self.name} rejected the credentials (HTTP {status})")
        if status == 429 or status >= 500:
            raise TransientBackendError(f"{self.name} answered HTTP {status}", retry_after=_retry_after(response))
        if status >= 400:
            problem = self._json(response, strict=False)
            if problem.get("limit") in TRANSIENT_LIMITS:
                raise TransientBackendError(f"{self.name} limit reached: {problem.get('limit')}")
            raise PermanentBackendError(f"{self.name} answered HTTP {status}: {problem.get('type') or problem}")
        return response

    def _json(self, response: requests.Response, *, strict: bool = True) -> dict:
        try:
            payload = response.json()
        except ValueError:
            if strict:
                raise TransientBackendError(f"{self.name} answered HTTP {response.status_code} with a body "
                                            "that is not JSON") from None
            return {}
        return payload if isinstance(payload, dict) else {}


def _retry_after(response: requests.Response) -> float | None:
    """Retry-After in seconds, when given as a number (the form Stalwart uses)."""
    value = response.headers.get("Retry-After", "").strip()
    seconds = whole_number_or_none(value)
    return None if seconds is None else float(seconds)
