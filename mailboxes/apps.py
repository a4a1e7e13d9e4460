import uuid

from django.apps import AppConfig


def mailbox_of_token(digest: str) -> uuid.UUID | None:
    """The visible mailbox whose anonymous token has this digest."""
    from mailboxes.models import Mailbox

    return Mailbox.objects.visible().filter(token_hash=digest).values_list("id", flat=True).first()


def sandbox_of_login(address: str, digest: str):
    """(id, owner) of the sandbox at `address` that receives now (by the database's clock)
    and whose SMTP password has this digest, or None."""
    from django.db.models.functions import Now

    from mailboxes.models import Mailbox

    sandbox = (Mailbox.objects.receiving(Now()).filter(address=address, sandbox=True, smtp_password_hash=digest)
               .select_related("owner").first())
    return None if sandbox is None else (sandbox.id, sandbox.owner)


class MailboxesConfig(AppConfig):
    name = "mailboxes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from accounts import identity

        # accounts.identity parses every credential but sits below the mailboxes a token opens.
        identity.mailbox_tokens_read_by(mailbox_of_token)
        identity.sandbox_logins_read_by(sandbox_of_login)
