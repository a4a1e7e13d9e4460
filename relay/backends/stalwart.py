"""Stalwart (0.16+) as the mail store, managed over its JMAP management API.

One mailbox is one Stalwart account (`x:Account`, type User) named by the local part in
the domain of the address. Calls go to the `apiUrl` announced at `/.well-known/jmap`.
Stalwart may answer HTTP 200 with an error inside the body, so every response is read,
not just its status.
"""
import threading

import requests
from django.conf import settings

from relay.backends.errors import PermanentBackendError, TransientBackendError
from relay.backends.errors import counted_backend_call


USING = ["urn:ietf:params:jmap:core", "urn:stalwart:jmap"]

# JMAP method-level error types a retry may fix; any other is a rejected request.
TRANSIENT_METHOD_ERRORS = {"serverUnavailable", "serverFail", "serverPartialFail", "tooManyRequests"}
# Request-level limits (RFC 8620 §3.6.1): Stalwart allows 4 concurrent requests and
# 1000 a minute per account; hitting either is a reason to wait, not to give up.
TRANSIENT_LIMITS = {"maxConcurrentRequests", "maxConcurrentUpload", "maxRequestsPerMinute"}


# provision() makes at most this many requests: discovery, domain, create, and the
# account lookup after an "alreadyExists".
PROVISION_REQUESTS_MAX = 4


class StalwartBackend:
    name = "stalwart"
    keeps_accounts = True

    def __init__(self, *, base_url: str, token: str, timeout: tuple[int, int]):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.provision_seconds_max = PROVISION_REQUESTS_MAX * sum(timeout)
        self.http = requests.Session()
        self.http.headers.update({"Authorization": f"Bearer {token}", "Accept": "application/json"})
        self._lock = threading.Lock()
        self._api_url: str | None = None
        self._domain_ids: dict[str, str] = {}

    # --- the two calls of a backend ----------------------------------------------------
    @counted_backend_call("provision")
    def provision(self, mailbox) -> str:
        local_part, domain = mailbox.address.rsplit("@", 1)
        domain_id = self._domain_id(domain)
        result = self._call(
            "x:Account/set",
            {
                "create": {
                    "mailbox": {
                        "@type": "User",
                        "name": local_part,
                        "domainId": domain_id,
                        "description": "Relay disposable mailbox",
                        "credentials": {},
                        "memberGroupIds": {},
                        "roles": {"@type": "User"},
                        "permissions": {"@type": "Inherit"},
                        "quotas": {},
                        "aliases": {},
                        "encryptionAtRest": {"@type": "Disabled"},
                    }
                }
            },
        )
        created = (result.get("created") or {}).get("mailbox")
        if created and created.get("id"):
            return str(created["id"])
        failure = (result.get("notCreated") or {}).get("mailbox") or {}
        if failure.get("type") == "alreadyExists":
            # A retried create whose first answer was lost: the account is ours.
            existing = self._account_id(local_part, domain_id)
            if existing:
                return existing
        raise PermanentBackendError(f"Stalwart refused to create {mailbox.address}: {_describe(failure)}")

    @counted_backend_call("deprovision")
    def deprovision(self, mailbox) -> None:
        account_id = mailbox.backend_id
        if not account_id:
            local_part, domain = mailbox.address.rsplit("@", 1)
            account_id = self._account_id(local_part, self._domain_id(domain))
            if account_id is None:
                return  # never created or already gone: nothing owed
        result = self._call("x:Account/set", {"destroy": [account_id]})
        if account_id in (result.get("destroyed") or []):
            return
        failure = (result.get("notDestroyed") or {}).get(account_id)
        if failure is None:
            raise TransientBackendError(f"Stalwart gave no outcome for destroying {mailbox.address}")
        if failure.get("type") == "notFound":
            return  # already gone counts as done
        raise PermanentBackendError(f"Stalwart refused to destroy {mailbox.address}: {_describe(failure)}")

    def accounts(self, domain: str, *, page_size: int = 500):
        """Page through the accounts in `domain` (x:Account/query with position and limit,
        then x:Account/get for their names), so 100,000 accounts never load at once."""
        domain_id = self._domain_id(domain)
        position = 0
        while True:
            ids = self._call("x:Account/query", {"filter": {"domainId": domain_id}, "sort": [{"property": "id"}],
                                                 "position": position, "limit": page_size}).get("ids") or []
            if not ids:
                return
            listed = self._call("x:Account/get", {"ids": ids, "properties": ["id", "name"]}).get("list") or []
            for account in listed:
                yield str(account["id"]), f"{account['name']}@{domain}"
            position += len(ids)
            if len(ids) < page_size:
                return

    # --- lookups -----------------------------------------------------------------------
    def _domain_id(self, domain: str) -> str:
        cached = self._domain_ids.get(domain)
        if cached:
            return cached
        ids = self._call("x:Domain/query", {"filter": {"name": domain}}).get("ids") or []
        if not ids:
            raise PermanentBackendError(f"domain {domain} is not configured on Stalwart")
        self._domain_ids[domain] = str(ids[0])
        return self._domain_ids[domain]

    def _account_id(self, local_part: str, domain_id: str) -> str | None:
        ids = self._call("x:Account/query", {"filter": {"name": local_part, "domainId": domain_id}}).get("ids") or []
        return str(ids[0]) if ids else None

    # --- transport ---------------------------------------------------------------------
    def _api(self) -> str:
        with self._lock:
            if self._api_url is None:
                response = self._send("GET", f"{self.base_url}/.well-known/jmap")
                api_url = _json(response).get("apiUrl")
                if not isinstance(api_url, str) or not api_url:
                    raise TransientBackendError("Stalwart's JMAP session has no apiUrl")
                self._api_url = requests.compat.urljoin(self.base_url + "/", api_url)
            return self._api_url

    def _call(self, method: str, arguments: dict) -> dict:
        body = {"using": USING, "methodCalls": [[method, arguments, "0"]]}
        response = self._send("POST", self._api(), json=body)
        responses = _json(response).get("methodResponses")
        if not isinstance(responses, list) or not responses or not isinstance(responses[0], list):
            raise TransientBackendError(f"Stalwart answered {method} without methodResponses")
        name, result = responses[0][0], responses[0][1] if len(responses[0]) > 1 else {}
        if name == "error":
            error_type = (result or {}).get("type", "unknown")
            error = f"Stalwart {method} failed: {_describe(result or {})}"
            if error_type in TRANSIENT_METHOD_ERRORS:
                raise TransientBackendError(error)
            raise PermanentBackendError(error)
        if not isinstance(result, dict):
            raise TransientBackendError(f"Stalwart answered {method} with {result!r}")
        return result

    def _send(self, verb: str, url: str, **kwargs) -> requests.Response:
        from relay.backends.limiter import backend_limiter

        try:
            # Every call takes a slot of the limit all workers share (relay/backends/limiter.py).
            with backend_limiter().slot(max_wait=settings.RELAY_BACKEND_SLOT_WAIT_SECONDS):
                response = self.http.request(verb, url, timeout=self.timeout, **kwargs)
        except requests.Timeout as exc:
            raise TransientBackendError(f"Stalwart timed out: {exc}") from exc
        except requests.RequestException as exc:
            raise TransientBackendError(f"Stalwart unreachable: {exc}") from exc
        status = response.status_code
        if status in (401, 403):
            raise PermanentBackendError(f"Stalwart rejected the credentials (HTTP {status})")
        if status == 429 or status >= 500:
            raise TransientBackendError(f"Stalwart answered HTTP {status}", retry_after=_retry_after(response))
        if status >= 400:
            problem = _json(response, strict=False)
            if problem.get("limit") in TRANSIENT_LIMITS:
                raise TransientBackendError(f"Stalwart limit reached: {problem.get('limit')}")
            raise PermanentBackendError(f"Stalwart answered HTTP {status}: {_describe(problem)}")
        return response


def _retry_after(response: requests.Response) -> float | None:
    """Retry-After in seconds, when given as a number (the form Stalwart uses)."""
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdigit() else None


def _json(response: requests.Response, *, strict: bool = True) -> dict:
    try:
        payload = response.json()
    except ValueError:
        if strict:
            raise TransientBackendError(f"Stalwart answered HTTP {response.status_code} with a body that is not JSON")
        return {}
    return payload if isinstance(payload, dict) else {}


def _describe(error: dict) -> str:
    parts = [str(error.get(key)) for key in ("type", "limit", "description", "detail") if error.get(key)]
    return ": ".join(parts) or "no detail given"
