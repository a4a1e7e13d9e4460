"""Stalwart (0.16+) as the mail store, over its JMAP management API: an account per address,
marked with its mailbox's id; Relay never takes over or deletes an account it did not make."""

from django.conf import settings

from relay.backends import (
    AccountExists,
    NotMadeByRelay,
    PermanentBackendError,
    TransientBackendError,
    counted_backend_call,
)
from relay.backends.jmap import JmapClient


USING = ["urn:ietf:params:jmap:core", "urn:stalwart:jmap"]

# JMAP method-level error types a retry may fix; any other is a rejected request.
TRANSIENT_METHOD_ERRORS = {"serverUnavailable", "serverFail", "serverPartialFail", "tooManyRequests"}


# provision() makes at most this many requests: discovery, domain and create.
PROVISION_REQUESTS_MAX = 3
# Relay's mark, the start of the description of every account it creates; the mailbox's
# id follows.
MARK_PREFIX = "Relay disposable mailbox "
# Stalwart's own administrator (its fallback admin), never an account Relay hands out.
STALWART_NAMES = frozenset({"admin"})


class StalwartBackend:
    name = "stalwart"
    keeps_accounts = True
    one_account_per_local_part = False

    def __init__(self, *, base_url: str, token: str, timeout: tuple[int, int]):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.provision_seconds_max = PROVISION_REQUESTS_MAX * sum(timeout)
        self._domain_ids: dict[str, str] = {}
        # One JMAP session for the management calls and the mail (relay/mailserver/),
        # every request under the limit all workers share.
        self.jmap = JmapClient(base_url=base_url, name="Stalwart", timeout=timeout, token=token, slot=_limited)

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
                        "description": f"{MARK_PREFIX}{mailbox.id}",
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
            # Not Relay's: every address Relay hands out is reserved for good before the
            # create, so an account already there was made by someone else.
            raise AccountExists(f"Stalwart already has an account {mailbox.address}, which Relay did not create")
        raise PermanentBackendError(f"Stalwart refused to create {mailbox.address}: {_describe(failure)}")

    def reserved_names(self) -> set[str]:
        """Local parts never handed out: Stalwart's own administrator."""
        return set(STALWART_NAMES)

    @counted_backend_call("deprovision")
    def deprovision(self, mailbox) -> None:
        """Destroy the account: by the id its create returned (Relay's), or, where that
        answer never came, the account of that name if its mark names this mailbox."""
        account_id = mailbox.backend_id
        if not account_id:
            local_part, domain = mailbox.address.rsplit("@", 1)
            account_id = self._account_id(local_part, self._domain_id(domain))
            if account_id is None:
                return  # never created or already gone: nothing owed
            description = self._description(account_id)
            if description is not None and description != f"{MARK_PREFIX}{mailbox.id}":
                raise NotMadeByRelay(f"Stalwart's account {mailbox.address} was not created by Relay for this "
                                     "mailbox; left alone")
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
            listed = self._call("x:Account/get", {"ids": ids, "properties": ["id", "name", "description"]}
                                ).get("list") or []
            for account in listed:
                # Only what Relay made is Relay's to judge: the operator's own accounts are not.
                if str(account.get("description") or "").startswith(MARK_PREFIX):
                    yield str(account["id"]), f"{account['name']}@{domain}"
            position += len(ids)
            if len(ids) < page_size:
                return

    # --- what the mail reader asks (relay/mailserver/) ---------------------------------
    @staticmethod
    def account_of(mailbox) -> str:
        """The JMAP accountId of a mailbox: the account's id, as provision() returned it."""
        return mailbox.backend_id

    def markers(self) -> None:
        """Stalwart offers no one call that says which accounts changed: the reader asks
        every live account's Email/changes, many to a request."""
        return None

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

    def _description(self, account_id: str) -> str | None:
        """The account's description ("" without one), or None if it is gone."""
        listed = self._call("x:Account/get", {"ids": [account_id], "properties": ["id", "description"]}
                            ).get("list") or []
        return str(listed[0].get("description") or "") if listed else None

    def _account_id(self, local_part: str, domain_id: str) -> str | None:
        ids = self._call("x:Account/query", {"filter": {"name": local_part, "domainId": domain_id}}).get("ids") or []
        return str(ids[0]) if ids else None

    # --- transport ---------------------------------------------------------------------
    def _call(self, method: str, arguments: dict) -> dict:
        name, result, _ = self.jmap.call([[method, arguments, "0"]], using=USING)[0]
        if name == "error":
            error_type = (result or {}).get("type", "unknown")
            error = f"Stalwart {method} failed: {_describe(result or {})}"
            if error_type in TRANSIENT_METHOD_ERRORS:
                raise TransientBackendError(error)
            raise PermanentBackendError(error)
        if not isinstance(result, dict):
            raise TransientBackendError(f"Stalwart answered {method} with {result!r}")
        return result


def _limited():
    """A slot of the limit on calls to Stalwart that every worker shares (relay/backends/limiter.py)."""
    from relay.backends.limiter import backend_limiter

    return backend_limiter().slot(max_wait=settings.RELAY_BACKEND_SLOT_WAIT_SECONDS)


def _describe(error: dict) -> str:
    parts = [str(error.get(key)) for key in ("type", "limit", "description", "detail") if error.get(key)]
    return ": ".join(parts) or "no detail given"
