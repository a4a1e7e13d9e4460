"""Cyrus IMAP (3.6+) as the mail store: an account per local part, made and removed by the
IMAP admin and marked as Relay's, mail read over JMAP. Relay never takes over or deletes
an account it did not make (docs/configuration.md, "A mail server as the backend")."""
import imaplib
import logging
import re
import socket
import ssl
from contextlib import contextmanager
from urllib.parse import urlsplit

from relay.backends import (
    AccountExists,
    NotMadeByRelay,
    PermanentBackendError,
    TransientBackendError,
    counted_backend_call,
)
from relay.backends.jmap import JmapClient
from relay.metrics import MAILSERVER_REQUESTS

logger = logging.getLogger(__name__)

# The rights the admin takes on each account: all of them (RFC 4314), so that its JMAP
# session may read the account and its IMAP DELETE may remove it.
ADMIN_RIGHTS = "lrswipkxtecda"
# What Cyrus answers (NO) when the account is already there, or already gone.
ALREADY_EXISTS = re.compile(rb"already exists", re.IGNORECASE)
DOES_NOT_EXIST = re.compile(rb"does not exist|nonexistent", re.IGNORECASE)
STATUS_LINE = re.compile(rb'^"?(?P<name>[^"]+?)"? \((?P<items>[^)]*)\)$')
# Relay's mark on an account it created (RFC 5464 METADATA): "relay-mailbox:<mailbox id>".
MARK_ENTRY = "/shared/comment"
MARK_PREFIX = "relay-mailbox:"
MARK_VALUE = re.compile(rb'"/shared/comment" (?:"(?P<value>[^"]*)"|NIL)', re.IGNORECASE)
# Names Cyrus keeps for itself, never an account Relay hands out.
CYRUS_NAMES = frozenset({"cyrus", "anonymous", "anyone", "admin", "root", "postmaster", "mailer-daemon"})
# imaplib does not know RFC 5464's commands; both run in the authenticated state.
imaplib.Commands.setdefault("GETMETADATA", ("AUTH", "SELECTED"))
imaplib.Commands.setdefault("SETMETADATA", ("AUTH", "SELECTED"))


class CyrusBackend:
    name = "cyrus"
    keeps_accounts = True
    # One account per local part, whatever the domain: a local part is unique across
    # RELAY_DOMAINS (mailboxes.lifecycle reserves it).
    one_account_per_local_part = True

    def __init__(self, *, imap_url: str, jmap_url: str, admin: str, password: str, timeout: float) -> None:
        parts = urlsplit(imap_url)
        self.tls = parts.scheme == "imaps"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or (993 if self.tls else 143)
        self.admin, self.password, self.timeout = admin, password, timeout
        # Connect and sign in, then CREATE and SETACL: each within the timeout.
        self.provision_seconds_max = 4 * timeout
        self.jmap = JmapClient(base_url=jmap_url, name="Cyrus", timeout=(timeout, timeout), basic=(admin, password))
        self._delimiter: str | None = None

    def reserved_names(self) -> set[str]:
        """Local parts never handed out: the admin's name and Cyrus's own."""
        return {self.admin.lower(), *CYRUS_NAMES}

    # --- the two calls of a backend ------------------------------------------------------------
    @counted_backend_call("provision")
    def provision(self, mailbox) -> str:
        account = self.account_of(mailbox)
        with self._imap() as imap:
            folder = self._folder(imap, account)
            outcome, detail = imap.create(folder)
            if outcome != "OK":
                if ALREADY_EXISTS.search(_text(detail)):
                    # Not Relay's: every name Relay hands out is reserved for good before
                    # the create, so an account already there was made by someone else.
                    raise AccountExists(f"Cyrus already has an account {account}, which Relay did not create")
                raise PermanentBackendError(f"Cyrus refused to create {folder}: {_text(detail).decode(errors='replace')}")
            # Marked before anything else, so that whatever fails after it, the account
            # is known as this mailbox's and its cleanup may remove it.
            outcome, detail = imap._simple_command("SETMETADATA", folder,
                                                   f'({MARK_ENTRY} "{MARK_PREFIX}{mailbox.id}")')
            if outcome != "OK":
                # Made a moment ago, unmarked: removed before anyone relies on it.
                imap.setacl(folder, self.admin, ADMIN_RIGHTS)
                imap.delete(folder)
                raise PermanentBackendError(f"Cyrus refused Relay's mark on {folder}: "
                                            f"{_text(detail).decode(errors='replace')}")
            outcome, detail = imap.setacl(folder, self.admin, ADMIN_RIGHTS)
            if outcome != "OK":
                raise PermanentBackendError(f"Cyrus refused the admin's rights on {folder}: "
                                            f"{_text(detail).decode(errors='replace')}")
        return account

    @counted_backend_call("deprovision")
    def deprovision(self, mailbox) -> None:
        """Delete the account if it is this mailbox's (its mark; for reconcile's orphans,
        which have no mailbox row, any of Relay's marks); gone already is done."""
        with self._imap() as imap:
            folder = self._folder(imap, self.account_of(mailbox))
            mark = self._mark(imap, folder)
            if mark is None:
                return  # never created, or already gone: nothing owed
            mailbox_id = getattr(mailbox, "id", None)
            if not mark.startswith(MARK_PREFIX) or (mailbox_id is not None and mark != f"{MARK_PREFIX}{mailbox_id}"):
                raise NotMadeByRelay(f"Cyrus's {folder} was not created by Relay for this mailbox; left alone")
            imap.setacl(folder, self.admin, ADMIN_RIGHTS)  # a create cut short may not have granted them yet
            outcome, detail = imap.delete(folder)
        if outcome == "OK" or DOES_NOT_EXIST.search(_text(detail)):
            return  # gone, or already gone: done either way
        raise PermanentBackendError(f"Cyrus refused to delete {folder}: {_text(detail).decode(errors='replace')}")

    def _mark(self, imap, folder: str) -> str | None:
        """The account's mark ("" when it has none), or None when there is no such account."""
        outcome, detail = imap._simple_command("GETMETADATA", folder, MARK_ENTRY)
        lines = imap.untagged_responses.pop("METADATA", [])
        if outcome != "OK":
            if DOES_NOT_EXIST.search(_text(detail)):
                return None
            raise PermanentBackendError(f"Cyrus refused to read {folder}'s annotation: "
                                        f"{_text(detail).decode(errors='replace')}")
        for line in lines:
            match = MARK_VALUE.search(line) if isinstance(line, bytes) else None
            if match:
                return (match["value"] or b"").decode("utf-8", "replace")
        return ""

    def accounts(self, domain: str):
        """Every account Cyrus holds, as (account name, its address in `domain`)."""
        for account in self.markers():
            yield account, f"{account}@{domain}"

    # --- what the mail reader asks (relay/mailserver/) -------------------------------------------
    @staticmethod
    def account_of(mailbox) -> str:
        """The account (and JMAP accountId) of a mailbox: its local part."""
        return mailbox.address.rsplit("@", 1)[0]

    def markers(self) -> dict[str, str]:
        """Every account's HIGHESTMODSEQ in one IMAP command: the reader asks JMAP only about
        accounts whose marker moved."""
        with self._imap() as imap:
            prefix = f"user{self._delimiter_of(imap)}"
            outcome, detail = imap._simple_command("LIST", '""', f"{prefix}%", "RETURN", "(STATUS (HIGHESTMODSEQ))")
            lines = imap.untagged_responses.pop("STATUS", [])
            imap.untagged_responses.pop("LIST", None)
        if outcome != "OK":
            raise TransientBackendError(f"Cyrus refused to list the accounts: {_text(detail).decode(errors='replace')}")
        markers = {}
        for line in lines:
            match = STATUS_LINE.match(line) if isinstance(line, bytes) else None
            if match is None:
                continue
            name = match["name"].decode("utf-8", "replace")
            if name.startswith(prefix):
                markers[self._account_name(name[len(prefix):])] = match["items"].decode("ascii", "replace")
        return markers

    # --- IMAP ----------------------------------------------------------------------------------------
    @contextmanager
    def _imap(self):
        """The admin, signed in, for one call; every network step within the timeout."""
        MAILSERVER_REQUESTS.labels("imap").inc()
        try:
            if self.tls:
                imap = imaplib.IMAP4_SSL(self.host, self.port, ssl_context=ssl.create_default_context(),
                                         timeout=self.timeout)
            else:
                imap = imaplib.IMAP4(self.host, self.port, timeout=self.timeout)
        except (OSError, imaplib.IMAP4.error) as exc:
            raise TransientBackendError(f"Cyrus unreachable at {self.host}:{self.port}: {exc}") from exc
        try:
            try:
                imap.login(self.admin, self.password)
            except imaplib.IMAP4.abort as exc:
                raise TransientBackendError(f"Cyrus dropped the connection at sign-in: {exc}") from exc
            except imaplib.IMAP4.error as exc:
                raise PermanentBackendError(f"Cyrus refused the admin's sign-in: {exc}") from exc
            yield imap
        except (imaplib.IMAP4.abort, socket.timeout, OSError) as exc:
            raise TransientBackendError(f"Cyrus failed mid-call: {exc}") from exc
        except imaplib.IMAP4.error as exc:  # a BAD answer: Relay asked wrongly
            raise PermanentBackendError(f"Cyrus rejected a command: {exc}") from exc
        finally:
            try:
                imap.logout()
            except (imaplib.IMAP4.error, OSError):
                pass

    def _delimiter_of(self, imap) -> str:
        """The server's hierarchy separator: "/" with `unixhierarchysep: yes` (Cyrus 3's
        default), "." without, read once from `LIST "" ""`."""
        if self._delimiter is None:
            outcome, detail = imap.list('""', '""')
            match = re.search(rb'\) "(.)"', _text(detail)) if outcome == "OK" else None
            self._delimiter = match.group(1).decode() if match else "/"
        return self._delimiter

    def _folder(self, imap, account: str) -> str:
        """The IMAP name of an account: user/<name>, or user.<name> with dots written as ^
        where the separator is a dot (Cyrus's own rule)."""
        delimiter = self._delimiter_of(imap)
        return f"user{delimiter}{account.replace('.', '^') if delimiter == '.' else account}"

    def _account_name(self, folder_tail: str) -> str:
        return folder_tail.replace("^", ".") if self._delimiter == "." else folder_tail


def _text(detail) -> bytes:
    return b" ".join(part for part in (detail or []) if isinstance(part, bytes))
