"""The mails accounts cause (docs/api.md): a sign-up queues an activation mail, a recovery
request a recovery mail, each in the transaction that makes its token, so an account is
never left with a token and no mail, nor a mail with no token."""
from django.conf import settings
from django.db import transaction
from django.template.loader import render_to_string

from accounts import services
from accounts.models import TokenAction
from relay.models import OutboxKind
from relay.outbox.build import mail_queue

SUBJECTS = {
    TokenAction.ACTIVATION: "Activate your Relay account",
    TokenAction.KEY_RECOVERY: "Recover your Relay API key",
    TokenAction.SIGN_IN: "Sign in to Relay",
}
KINDS = {TokenAction.ACTIVATION: OutboxKind.ACTIVATION, TokenAction.KEY_RECOVERY: OutboxKind.RECOVERY,
         TokenAction.SIGN_IN: OutboxKind.SIGN_IN}
LINK_PATHS = {TokenAction.ACTIVATION: "/activate/", TokenAction.KEY_RECOVERY: "/recover/",
              TokenAction.SIGN_IN: "/inbox/sign-in/"}
TEMPLATES = {TokenAction.ACTIVATION: "activation", TokenAction.KEY_RECOVERY: "recovery", TokenAction.SIGN_IN: "sign_in"}


def _lifetime(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    if rest:
        return f"{seconds} seconds"
    if minutes % 60 == 0:
        hours = minutes // 60
        return "1 hour" if hours == 1 else f"{hours} hours"
    return "1 minute" if minutes == 1 else f"{minutes} minutes"


def _queue_token_mail(issued: services.IssuedToken) -> None:
    token = issued.token
    context = {
        "login": token.account.login,
        "link": settings.RELAY_PUBLIC_URL + LINK_PATHS[token.action] + issued.link_token,
        "code": issued.code,
        "lifetime": _lifetime(settings.RELAY_TOKEN_TTL_SECONDS),
    }
    name = TEMPLATES[token.action]
    mail_queue(kind=KINDS[token.action], token=token, to=[token.account.email], subject=SUBJECTS[token.action],
               text=render_to_string(f"relay/mail/{name}.txt", context),
               html=render_to_string(f"relay/mail/{name}.html", context))


def account_sign_up(*, email: str, login: str) -> None:
    """POST /accounts. Says nothing back: whether the email had an account, or the login
    was taken, stays unknown to the caller; the email's owner is told by mail."""
    with transaction.atomic():
        issued = services.account_sign_up(email=email, login=login)
        if isinstance(issued, services.LoginTaken):
            context = {"login": issued.login, "link": settings.RELAY_PUBLIC_URL}
            mail_queue(kind=OutboxKind.ACTIVATION, to=[issued.email], subject="Your Relay sign-up: that login is taken",
                       text=render_to_string("relay/mail/login_taken.txt", context),
                       html=render_to_string("relay/mail/login_taken.html", context))
        elif issued is not None:
            _queue_token_mail(issued)


def account_recovery_request(*, email: str) -> None:
    """POST /accounts/recover: a recovery mail if an active account has that email."""
    with transaction.atomic():
        issued = services.recovery_request(email=email)
        if issued is not None:
            _queue_token_mail(issued)


def account_sign_in_request(*, email: str) -> None:
    """The web inbox's sign-in: a mail with a code and a link if an active account has that
    email; nothing otherwise, and the caller answers the same."""
    with transaction.atomic():
        issued = services.sign_in_request(email=email)
        if issued is not None:
            _queue_token_mail(issued)
