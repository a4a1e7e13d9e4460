from django.conf import settings
from django.core.management.base import BaseCommand

from relay.smtp import run_forever


class Command(BaseCommand):
    help = "Run Relay's inbound SMTP server (RELAY_SMTP_HOST:RELAY_SMTP_PORT) until SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.RELAY_SMTP_HOST)
        parser.add_argument("--port", type=int, default=settings.RELAY_SMTP_PORT)

    def handle(self, *args, host: str, port: int, **options):
        self.stdout.write(f"Relay SMTP on {host}:{port} for {', '.join(settings.RELAY_DOMAINS)}")
        run_forever(host, port)
