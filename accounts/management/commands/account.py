from django.core.management.base import BaseCommand, CommandError

from accounts.errors import RelayError
from accounts.models import Account
from accounts.services import account_suspend, account_unsuspend


class Command(BaseCommand):
    help = ("Suspend an account (its keys get 403 account_suspended and its mailboxes refuse mail) "
            "or unsuspend it (back to active, or to provisioned if it was never activated).")

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["suspend", "unsuspend"])
        parser.add_argument("login")

    def handle(self, *args, action: str, login: str, **options):
        account = Account.objects.filter(login=login).first()
        if account is None:
            raise CommandError(f"No account with login {login!r}.")
        try:
            account = (account_suspend if action == "suspend" else account_unsuspend)(account=account)
        except RelayError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"{account.login}: {account.status}")
