import json

from django.core.management.base import BaseCommand

from expiry.operators import expiry_stats


class Command(BaseCommand):
    help = "Count mailboxes by status and cleanups by state."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print the counts as one JSON object.")

    def handle(self, *args, **options):
        stats = expiry_stats()
        if options["json"]:
            self.stdout.write(json.dumps(stats))
            return
        for group, counts in stats.items():
            self.stdout.write(f"{group}: " + ", ".join(f"{name} {n}" for name, n in counts.items()))
