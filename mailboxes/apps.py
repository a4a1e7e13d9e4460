from django.apps import AppConfig


class MailboxesConfig(AppConfig):
    name = "mailboxes"
    default_auto_field = "django.db.models.BigAutoField"
