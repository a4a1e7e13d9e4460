"""What each OAuth scope opens (docs/agents.md, "Scopes"): one table for the REST routes and
the MCP tools. An API key or a mailbox token opens everything its owner may do; an access
token opens what its scopes name, and no route that is not in this table (keys, webhooks,
the account itself stay an API key's)."""
from rest_framework import exceptions

MAILBOXES, MAIL_READ, MAIL_SEND, DOMAINS = "mailboxes", "mail:read", "mail:send", "domains"
ALL = (MAILBOXES, MAIL_READ, MAIL_SEND, DOMAINS)

# A REST view (by class name): the scope of each method, or of all of them.
ROUTES: dict[str, str | dict[str, str]] = {
    "IndexView": MAILBOXES, "WhoAmIView": MAILBOXES,
    "MailboxCollectionView": MAILBOXES, "MailboxDetailView": MAILBOXES, "MailboxRenewView": MAILBOXES,
    "MessageSearchView": MAIL_READ, "MessageCollectionView": {"GET": MAIL_READ, "POST": MAIL_SEND},
    "MessageDetailView": MAIL_READ, "MessageRawView": MAIL_READ, "AttachmentView": MAIL_READ,
    "OutboundCollectionView": MAIL_SEND, "OutboundDetailView": MAIL_SEND,
    "ReplyView": MAIL_SEND, "ForwardView": MAIL_SEND, "ThreadCollectionView": MAIL_READ, "ThreadDetailView": MAIL_READ,
    "DomainCollectionView": DOMAINS, "DomainDetailView": DOMAINS, "DomainVerifyView": DOMAINS,
    "HtmlCheckView": MAIL_READ, "LinkCheckView": MAIL_READ, "SpamCheckView": MAIL_READ, "HeaderCheckView": MAIL_READ,
}
# The held waits and event streams (api/waiting.py) read mail.
WAITS = MAIL_READ

TOOLS: dict[str, str] = {
    "create_mailbox": MAILBOXES, "list_mailboxes": MAILBOXES, "get_mailbox": MAILBOXES, "renew_mailbox": MAILBOXES,
    "delete_mailbox": MAILBOXES,
    "list_messages": MAIL_READ, "get_message": MAIL_READ, "wait_for_message": MAIL_READ, "wait_for_code": MAIL_READ,
    "search_messages": MAIL_READ, "get_attachment": MAIL_READ, "check_message": MAIL_READ, "list_threads": MAIL_READ, "get_thread": MAIL_READ,
    "send_message": MAIL_SEND, "reply_to_message": MAIL_SEND, "forward_message": MAIL_SEND,
    "create_domain": DOMAINS, "list_domains": DOMAINS, "verify_domain": DOMAINS, "delete_domain": DOMAINS,
}


def route_scope(view, method: str) -> str | None:
    """The scope a REST view's `method` needs, or None where no access token may go."""
    scope = ROUTES.get(type(view).__name__)
    return scope.get(method) if isinstance(scope, dict) else scope


def insufficient_scope(scope: str | None) -> str:
    """The WWW-Authenticate of a 403 for a token whose grant does not cover `scope` (RFC 6750 §3.1)."""
    wanted = f', scope="{scope}"' if scope else ""
    return f'Bearer realm="relay", error="insufficient_scope"{wanted}'


class InsufficientScope(exceptions.PermissionDenied):
    """An access token whose grant does not cover what it asked for (403, and the scope
    to ask for in WWW-Authenticate: api.errors)."""

    def __init__(self, scope: str | None):
        self.scope = scope
        super().__init__(f"This access token's grant does not cover this; it needs the scope {scope}." if scope
                         else "An access token cannot do this; it needs an API key.")
