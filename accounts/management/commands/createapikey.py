from django.core.management.base import BaseCommand, CommandError

from accounts.errors import RelayError
from accounts.models import Plan
from accounts.services import account_create_with_key


class Command(BaseCommand):
    help = ("Create an API key for account NAME (creating it, active, if needed). "
            "The key is printed alone on the last line.")

    def add_arguments(self, parser):
        parser.add_argument("name", help="the account's login")
        parser.add_argument("--plan", choices=Plan.values, default=Plan.FREE)
        parser.add_argument("--email", default=None, help="the account's email, for key recovery")

    def handle(self, *args, name: str, plan: str, email: str | None, **options):
        name = name.strip()
        if not name or len(name) > 100:
            raise CommandError("NAME must be 1 to 100 characters.", returncode=2)
        try:
            account, key = account_create_with_key(login=name, plan=plan, email=email)
        except RelayError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"API key for {account.login} (plan {account.plan}); it is shown only now:")
        self.stdout.write(key)
