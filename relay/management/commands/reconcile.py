from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from relay.backends import NothingToReconcile
from relay.reconcile import reconcile


class Command(BaseCommand):
    help = ("List the mail backend's accounts in Relay's domains that no live mailbox owns; with --destroy, "
            "remove them (with the cleanups' retry rules).")

    def add_arguments(self, parser):
        parser.add_argument("--domain", action="append", help="Only this domain (repeatable). Default: RELAY_DOMAINS.")
        parser.add_argument("--destroy", action="store_true", help="Remove the orphans found.")

    def handle(self, *args, domain: list[str] | None, destroy: bool, **options):
        domains = [d.strip().lower() for d in domain] if domain else settings.RELAY_DOMAINS
        unknown = [d for d in domains if d not in settings.RELAY_DOMAINS]
        if unknown:
            raise CommandError(f"not one of RELAY_DOMAINS: {', '.join(unknown)}")
        try:
            result = reconcile(domains=domains, destroy=destroy)
        except NothingToReconcile as exc:
            self.stdout.write(f"Nothing to reconcile: {exc}.")
            return
        for orphan in result.orphans:
            self.stdout.write(f"{orphan.backend_id}  {orphan.address}")
        self.stdout.write(f"{len(result.orphans)} orphan account(s)")
        if destroy:
            self.stdout.write(f"destroyed {len(result.destroyed)}, failed {len(result.failed)}")
            for orphan, error in result.failed:
                self.stderr.write(f"could not destroy {orphan.address}: {error}")
            if result.failed:
                raise CommandError(f"{len(result.failed)} orphan(s) could not be destroyed")
