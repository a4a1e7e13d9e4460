from django.core.management.base import BaseCommand

from mailboxes.models import Plan
from mailboxes.keys import owner_create_api_key


class Command(BaseCommand):
    help = "Create an API key for owner NAME (creating the owner if needed). The key is printed alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--plan", choices=Plan.values, default=Plan.FREE)

    def handle(self, *args, name: str, plan: str, **options):
        name = name.strip()
        if not name or len(name) > 100:
            self.stderr.write("NAME must be 1 to 100 characters.")
            raise SystemExit(2)
        owner, key = owner_create_api_key(name=name, plan=plan)
        self.stdout.write(f"API key for {owner.name} (plan {owner.plan}); it is shown only now:")
        self.stdout.write(key)
