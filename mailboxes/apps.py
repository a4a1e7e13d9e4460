import uuid

from django.apps import AppConfig


def mailbox_of_token(digest: str) -> uuid.UUID | None:
    """The visible mailbox whose anonymous token has this digest."""
    from mailboxes.models import Mailbox

    return Mailbox.objects.visible().filter(token_hash=digest).values_list("id", flat=True).first()


class MailboxesConfig(AppConfig):
    name = "mailboxes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from accounts import identity

        # accounts.identity parses every credential but sits below the mailboxes a token opens.
        identity.mailbox_tokens_read_by(mailbox_of_token)
