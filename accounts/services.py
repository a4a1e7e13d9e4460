"""Accounts and their one-time tokens (docs/api.md); every status change goes through
account_set_status. Their keys are in accounts/credentials.py; whether one may act, in
accounts/identity.py."""
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.functions import Now
from django.db.models import F, Q

from accounts import tokens
from accounts.identity import MAY_ACT, may_act
from accounts.credentials import api_key_create, key_revoked
from accounts.errors import AccountSuspended, Conflict, Gone, InvalidRequest
from accounts.models import LOGIN_PATTERN, Account, AccountStatus, ApiKey, Plan, Token, TokenAction
from core.clock import db_now

logger = logging.getLogger(__name__)

TOKEN_GONE = "This link or code has expired or was already used."
WRONG_CODE = "That code is not right."
ACTIVATION_NO_MATCH = "That email and code do not match an account waiting for activation."


# --- status ----------------------------------------------------------------------------
def account_set_status(*, account: Account, status: str) -> Account:
    """Move `account` to `status`, setting status_changed_at and the activated, suspended and
    unsuspended times by mailroom's rules; suspended → active lands on provisioned if never activated."""
    if status not in AccountStatus.values:
        raise InvalidRequest(f"Unknown account status {status!r}.", field="status")
    with transaction.atomic():
        # The row lock orders two concurrent changes: each sees the other's result.
        account = Account.objects.select_for_update().get(id=account.id)
        old = account.status
        if status == old:
            return account
        if old == AccountStatus.ACTIVE and status == AccountStatus.PROVISIONED:
            raise InvalidRequest("An active account cannot go back to provisioned.", field="status")
        now = db_now()
        account.status = status
        account.status_changed_at = now
        if status == AccountStatus.ACTIVE and old == AccountStatus.PROVISIONED:
            account.activated_at = now
        elif status == AccountStatus.ACTIVE and old == AccountStatus.SUSPENDED:
            account.unsuspended_at = now
            account.suspended_at = None
            if account.activated_at is None:
                account.status = AccountStatus.PROVISIONED
        elif status == AccountStatus.SUSPENDED:
            account.suspended_at = now
            account.unsuspended_at = None
        account.save(update_fields=["status", "status_changed_at", "activated_at", "suspended_at", "unsuspended_at"])
    key_revoked(account_id=account.id)
    logger.info("account %s: %s -> %s", account.login, old, account.status)
    return account


def account_suspend(*, account: Account) -> Account:
    return account_set_status(account=account, status=AccountStatus.SUSPENDED)


def account_unsuspend(*, account: Account) -> Account:
    """Back to active, or to provisioned for an account that was never activated."""
    if account.status != AccountStatus.SUSPENDED:
        raise InvalidRequest(f"Account {account.login} is not suspended.")
    return account_set_status(account=account, status=AccountStatus.ACTIVE)


def account_create_with_key(*, login: str, plan: str = Plan.FREE, email: str | None = None) -> tuple[Account, str]:
    """`createapikey`: the account `login` (created active if new, its plan set) and a
    new key for it."""
    if email and Account.objects.filter(email__iexact=email).exclude(login=login).exists():
        raise Conflict(f"Another account has the email {email}.")
    with transaction.atomic():
        account, created = Account.objects.get_or_create(login=login, defaults={"plan": plan, "email": email})
        if created:
            account = account_set_status(account=account, status=AccountStatus.ACTIVE)
        changes = {name: value for name, value in (("plan", plan), ("email", email))
                   if value and getattr(account, name) != value}
        if changes:
            for name, value in changes.items():
                setattr(account, name, value)
            account.save(update_fields=list(changes))
        _, key = api_key_create(account=account)
    return account, key


# --- tokens ----------------------------------------------------------------------------
@dataclass(frozen=True)
class IssuedToken:
    """A token as it goes into a mail: the row, the signed link token and the code.
    The clear secret and code exist only here, on their way into the mail."""

    token: Token
    link_token: str
    code: str


@dataclass(frozen=True)
class LoginTaken:
    """A sign-up whose login another account has: answered as any sign-up, and the email's
    owner told by mail, so the answer says nothing."""

    email: str
    login: str


def token_issue(*, account: Account, action: str) -> IssuedToken:
    secret, code = tokens.new_secret(), tokens.new_code()
    digest = tokens.secret_hash(secret)
    # A new activation token starts with the wrong codes its account's earlier ones had
    # met: signing up again with the same email must not buy five new guesses.
    tried = 0
    if action == TokenAction.ACTIVATION:
        tried = max(Token.objects.filter(account=account, action=action).values_list("wrong_codes", flat=True),
                    default=0)
    token = Token.objects.create(
        account=account, action=action, secret_hash=digest, code_hash=tokens.code_hash(digest, code),
        expires_at=db_now() + timedelta(seconds=settings.RELAY_TOKEN_TTL_SECONDS), wrong_codes=tried)
    return IssuedToken(token=token, link_token=tokens.sign(action, secret, code), code=code)


def token_usable(token: Token, now=None, *, by_link: bool = False) -> bool:
    """Unused, unexpired, and (unless used `by_link`, whose 256-bit secret nobody guesses)
    not burnt by wrong codes."""
    now = now or db_now()
    return (token.consumed_at is None and token.expires_at > now
            and (by_link or token.wrong_codes < tokens.MAX_WRONG_CODES))


def _consume(token: Token, *, try_counted: bool = False, by_link: bool = False) -> None:
    """Use the token up, or raise Gone: the compare-and-set is the single use. With
    `try_counted`, this code's try was counted already."""
    now = db_now()
    tries = Q() if by_link else (Q(wrong_codes__lte=tokens.MAX_WRONG_CODES) if try_counted
                                 else Q(wrong_codes__lt=tokens.MAX_WRONG_CODES))
    used = Token.objects.filter(tries, id=token.id, consumed_at=None, expires_at__gt=now).update(consumed_at=now)
    if not used:
        raise Gone(TOKEN_GONE)


def _count_try(token: Token) -> bool:
    """Count a try before the code is checked (False if none is left): counted first, the
    limit holds under parallel guesses."""
    return bool(Token.objects.filter(id=token.id, consumed_at=None, expires_at__gt=Now(),
                                     wrong_codes__lt=tokens.MAX_WRONG_CODES)
                .update(wrong_codes=F("wrong_codes") + 1))


def _wrong_code(token: Token) -> InvalidRequest:
    """What a wrong recovery code (already counted by _count_try) answers."""
    left = tokens.MAX_WRONG_CODES - token.wrong_codes - 1
    logger.info("wrong code for %s token %s (%d tries left)", token.action, token.id, max(left, 0))
    if left <= 0:
        return InvalidRequest("That code is not right, and it was the last try: ask for a new mail.", field="code")
    return InvalidRequest(WRONG_CODE, field="code")


def _token_by_secret(secret: bytes, action: str, *, by_link: bool = False) -> Token:
    token = Token.objects.select_related("account").filter(secret_hash=tokens.secret_hash(secret), action=action).first()
    if token is None or not token_usable(token, by_link=by_link):
        # Signed by us but gone: used, expired, burnt, or purged with its account.
        raise Gone(TOKEN_GONE)
    return token


def _activate(token: Token, *, try_counted: bool = False, by_link: bool = False) -> tuple[Account, str]:
    """Consume an activation token and give its account its first key."""
    with transaction.atomic():
        _consume(token, try_counted=try_counted, by_link=by_link)
        account = Account.objects.select_for_update().get(id=token.account_id)
        if account.status == AccountStatus.SUSPENDED:
            raise AccountSuspended()
        if account.status == AccountStatus.ACTIVE:
            # Activated already, by another of its tokens.
            raise Gone(TOKEN_GONE)
        account = account_set_status(account=account, status=AccountStatus.ACTIVE)
        _, key = api_key_create(account=account)
    return account, key


def account_activate_by_link(*, link_token: str) -> tuple[Account, str]:
    secret = tokens.verify(TokenAction.ACTIVATION, link_token)
    return _activate(_token_by_secret(secret, TokenAction.ACTIVATION, by_link=True), by_link=True)


def account_activate_by_code(*, email: str, code: str) -> tuple[Account, str]:
    """Activation by the mailed code: an unknown email, a wrong code and a burnt token get
    one answer. Tries count against the newest token, which starts where earlier ones stopped."""
    no_match = InvalidRequest(ACTIVATION_NO_MATCH, field="code")
    token = (Token.objects.select_related("account")
             .filter(account__email__iexact=email, account__status=AccountStatus.PROVISIONED,
                     action=TokenAction.ACTIVATION, consumed_at=None, expires_at__gt=Now())
             .order_by("-created_at").first())
    if token is None or not _count_try(token):
        raise no_match
    if not secrets.compare_digest(tokens.code_hash(token.secret_hash, str(code)), token.code_hash):
        logger.info("wrong activation code for account %s", token.account.login)
        raise no_match
    return _activate(token, try_counted=True)


def activation_token_for_page(*, link_token: str) -> Token:
    """What an activation link's page shows (GET /activate/{token}): the token, if the
    link is ours and still usable. Changes nothing: mail scanners open links."""
    secret = tokens.verify(TokenAction.ACTIVATION, link_token)
    return _token_by_secret(secret, TokenAction.ACTIVATION, by_link=True)


def recovery_confirm(*, link_token: str, code: str) -> tuple[Account, str]:
    """A new key for the account; every other key of it is revoked."""
    secret, mac = tokens.decode(link_token)
    token = Token.objects.filter(secret_hash=tokens.secret_hash(secret), action=TokenAction.KEY_RECOVERY).first()
    if token is None:
        # A forged secret names no token; one of ours that was purged is gone. The MAC
        # covers the code, so a wrong code cannot be told from a forged link.
        if tokens.signature_valid(TokenAction.KEY_RECOVERY, secret, mac, str(code)):
            raise Gone(TOKEN_GONE)
        raise tokens.BadSignature("This link or code is not valid.")
    if not _count_try(token):
        raise Gone(TOKEN_GONE)
    if not tokens.signature_valid(TokenAction.KEY_RECOVERY, secret, mac, str(code)):
        raise _wrong_code(token)
    with transaction.atomic():
        _consume(token, try_counted=True)
        account = Account.objects.select_for_update().get(id=token.account_id)
        if not may_act(account.status):
            raise Gone(TOKEN_GONE)
        ApiKey.objects.filter(account=account, revoked_at=None).update(revoked_at=Now())
        key_revoked(account_id=account.id)
        _, key = api_key_create(account=account)
    logger.info("account %s recovered its key; its other keys are revoked", account.login)
    return account, key


# --- sign-up and recovery requests -------------------------------------------------------
def _valid_login(login: str) -> str:
    login = (login or "").strip().lower()
    if not re.fullmatch(LOGIN_PATTERN, login):
        raise InvalidRequest("A login is 3 to 32 of a-z, 0-9, '_' and '-'.", field="login")
    return login


def _email_taken(email: str) -> Account | None:
    return Account.objects.filter(email__iexact=email).first()


def account_sign_up(*, email: str, login: str) -> IssuedToken | LoginTaken | None:
    """A new provisioned account and its activation token (inside the mail's transaction);
    None for a known email, or a fresh token if it awaits activation; LoginTaken for a taken login."""
    login = _valid_login(login)
    existing = _email_taken(email)
    if existing is None:
        if Account.objects.filter(login=login).exists():
            return LoginTaken(email=email, login=login)
        try:
            with transaction.atomic():
                account = Account.objects.create(email=email, login=login)
                issued = token_issue(account=account, action=TokenAction.ACTIVATION)
            logger.info("account %s signed up", login)
            return issued
        except IntegrityError:
            # A concurrent sign-up took the email or the login first.
            existing = _email_taken(email)
            if existing is None:
                return LoginTaken(email=email, login=login)
    if existing.status == AccountStatus.PROVISIONED:
        return token_issue(account=existing, action=TokenAction.ACTIVATION)
    return None


def recovery_request(*, email: str) -> IssuedToken | None:
    """A recovery token for the active account with `email`, or None if there is none
    (the caller answers the same either way)."""
    account = Account.objects.filter(MAY_ACT, email__iexact=email).first()
    if account is None:
        return None
    logger.info("account %s asked to recover its key", account.login)
    return token_issue(account=account, action=TokenAction.KEY_RECOVERY)


# --- signing in to the web inbox ---------------------------------------------------------
SIGN_IN_NO_MATCH = "That email and code do not match a sign-in that is still open: ask for a new mail."
# Sign-in tokens an account may have open at once: each allows MAX_WRONG_CODES guesses, so
# this bounds the guesses at its codes within a token's lifetime, however many are asked for.
SIGN_INS_OPEN = 3


def sign_in_request(*, email: str) -> IssuedToken | None:
    """A sign-in token for the active account with `email`, or None: no such account, or
    SIGN_INS_OPEN still open (the caller answers the same)."""
    account = Account.objects.select_for_update().filter(MAY_ACT, email__iexact=email).first()
    if account is None:
        return None
    open_now = Token.objects.filter(account=account, action=TokenAction.SIGN_IN, consumed_at=None,
                                    expires_at__gt=Now()).count()
    if open_now >= SIGN_INS_OPEN:
        logger.info("account %s has %d sign-ins open; no new one is mailed", account.login, open_now)
        return None
    return token_issue(account=account, action=TokenAction.SIGN_IN)


def _signed_in(token: Token, *, try_counted: bool = False, by_link: bool = False) -> Account:
    with transaction.atomic():
        _consume(token, try_counted=try_counted, by_link=by_link)
        account = Account.objects.get(id=token.account_id)
        if not may_act(account.status):
            raise Gone(TOKEN_GONE)
    logger.info("account %s signed in to the web inbox", account.login)
    return account


def sign_in_by_code(*, email: str, code: str) -> Account:
    """The account a mailed sign-in code opens. An unknown email, a wrong code and a burnt
    token get one answer; the fifth wrong code burns the token."""
    token = (Token.objects.filter(account__in=Account.objects.filter(MAY_ACT), account__email__iexact=email,
                                  action=TokenAction.SIGN_IN, consumed_at=None, expires_at__gt=Now())
             .order_by("-created_at").first())
    if token is None or not _count_try(token):
        raise InvalidRequest(SIGN_IN_NO_MATCH, field="code")
    if not secrets.compare_digest(tokens.code_hash(token.secret_hash, str(code).strip()), token.code_hash):
        raise InvalidRequest(SIGN_IN_NO_MATCH, field="code")
    return _signed_in(token, try_counted=True)


def sign_in_by_link(*, link_token: str) -> Account:
    """The account a mailed sign-in link opens (used up), or Gone."""
    secret = tokens.verify(TokenAction.SIGN_IN, link_token)
    return _signed_in(_token_by_secret(secret, TokenAction.SIGN_IN, by_link=True), by_link=True)
