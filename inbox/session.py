"""Who a browser is: an account signed in (a Django session, from a mailed code or link,
or an API key pasted once) and the anonymous mailboxes it made (their tokens in one
HttpOnly cookie). Each is a credential accounts.identity.authenticate reads, as the API's
are: a session ends at once when its account may no longer act or its key is revoked."""
import logging
import uuid

from django.contrib import auth
from django.core import signing

from accounts import identity
from accounts.errors import Forbidden
from accounts.identity import Caller
from accounts.models import Account
from accounts.oauth import oauth_user_for
from mailboxes.models import Mailbox

logger = logging.getLogger(__name__)

ACCOUNT = "inbox_account"
API_KEY = "inbox_api_key"
MAILBOXES_COOKIE = "relay_mailboxes"
# The anonymous mailboxes one browser keeps (newest first); older ones drop off the list.
MAILBOXES_KEPT = 20
# A sandbox's SMTP password, just made, on its way to the one page that shows it.
PASSWORD_COOKIE = "relay_smtp_once"
PASSWORD_SECONDS = 300


def sign_in(request, account: Account, *, api_key_id: int | None = None) -> None:
    """Start a session for `account` (a new session id: no fixation), signed in to the OAuth
    toolkit's consent page too, as the account's own Django user."""
    auth.login(request, oauth_user_for(account), backend="django.contrib.auth.backends.ModelBackend")
    request.session.cycle_key()
    request.session[ACCOUNT] = account.id
    request.session[API_KEY] = api_key_id


def sign_out(request) -> None:
    auth.logout(request)  # the session flushed, the consent page's user gone with it


def account_caller(request) -> Caller | None:
    """The signed-in account, checked on every request: an account that may no longer act
    (suspended) or a revoked key ends the session."""
    account_id = request.session.get(ACCOUNT)
    if account_id is None:
        return None
    try:
        caller, reason = identity.authenticate(identity.Session(account_id, request.session.get(API_KEY))), "its key revoked"
    except Forbidden as refused:
        caller, reason = None, refused.message
    if caller is None:
        logger.info("ended the web inbox session of account %s: %s", account_id, reason)
        sign_out(request)
    return caller


def caller_for_key(key: str) -> Caller | None:
    """The caller an API key pasted into the sign-in page names, or None; an account that
    may not act raises its refusal, as the API does."""
    return identity.authenticate(key, kinds={identity.API_KEY})


def kept_tokens(request) -> dict[uuid.UUID, str]:
    """Mailbox id → token of the anonymous mailboxes this browser made."""
    kept = {}
    for pair in request.COOKIES.get(MAILBOXES_COOKIE, "").split("|"):
        mailbox_id, _, token = pair.partition(":")
        try:
            kept[uuid.UUID(mailbox_id)] = token
        except ValueError:
            continue
    return kept


def keep_token(request, response, mailbox_id: uuid.UUID, token: str) -> None:
    """Add a new anonymous mailbox's token to the browser's cookie."""
    kept = {mailbox_id: token, **kept_tokens(request)}
    value = "|".join(f"{key}:{value}" for key, value in list(kept.items())[:MAILBOXES_KEPT])
    response.set_cookie(MAILBOXES_COOKIE, value, max_age=30 * 24 * 3600, httponly=True, samesite="Lax",
                        secure=request.is_secure())


def caller_for(request, mailbox_id: uuid.UUID) -> Caller | None:
    """Who may open mailbox `mailbox_id` in this browser: the token it kept for that
    (anonymous) mailbox, else the signed-in account, whose ownership the read checks; None
    for anyone else (the page is then a 404)."""
    token = kept_tokens(request).get(mailbox_id)
    if token:
        anonymous = identity.authenticate(token, kinds={identity.MAILBOX_TOKEN})
        if anonymous is not None and anonymous.mailbox_id == mailbox_id:
            return anonymous
    return account_caller(request)


def anonymous_mailboxes(request) -> list[Mailbox]:
    """The anonymous mailboxes this browser holds a live token for, newest first."""
    kept = kept_tokens(request)
    found = {mailbox.id: mailbox for mailbox in Mailbox.objects.visible().filter(id__in=list(kept), owner=None)}
    return [found[mailbox_id] for mailbox_id in kept
            if mailbox_id in found and found[mailbox_id].token_hash == identity.secret_digest(kept[mailbox_id])]


# --- a sandbox's SMTP password, shown once ------------------------------------------------------
def password_cookie_path(mailbox_id: uuid.UUID) -> str:
    return f"/inbox/{mailbox_id}"


def show_password_once(request, response, mailbox_id: uuid.UUID, password: str) -> None:
    """Carry a sandbox's new SMTP password across the redirect to its page (POST, redirect,
    GET), which shows it and forgets it: signed, HttpOnly, for that page's path only and a
    few minutes. The server keeps only its digest."""
    value = signing.dumps({"mailbox": str(mailbox_id), "password": password}, salt=PASSWORD_COOKIE)
    response.set_cookie(PASSWORD_COOKIE, value, max_age=PASSWORD_SECONDS, path=password_cookie_path(mailbox_id),
                        httponly=True, samesite="Strict", secure=request.is_secure())


def password_to_show(request, mailbox: Mailbox) -> str | None:
    """The password show_password_once sent for `mailbox`, if it is still the sandbox's (not
    rotated since, nor too old)."""
    value = request.COOKIES.get(PASSWORD_COOKIE)
    if value is None:
        return None
    try:
        found = signing.loads(value, salt=PASSWORD_COOKIE, max_age=PASSWORD_SECONDS)
    except signing.BadSignature:
        return None
    if not isinstance(found, dict) or found.get("mailbox") != str(mailbox.id):
        return None
    password = found.get("password")
    if not isinstance(password, str) or identity.secret_digest(password) != mailbox.smtp_password_hash:
        return None
    return password


def password_forget(request, response, mailbox_id: uuid.UUID) -> None:
    """The page that showed the password (or would have) tells the browser to drop it."""
    if PASSWORD_COOKIE in request.COOKIES:
        response.delete_cookie(PASSWORD_COOKIE, path=password_cookie_path(mailbox_id), samesite="Strict")
