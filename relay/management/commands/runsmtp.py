from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from relay.inbound.server import run_forever


class Command(BaseCommand):
    help = "Run Relay's inbound SMTP server (RELAY_SMTP_HOST:RELAY_SMTP_PORT) until SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.RELAY_SMTP_HOST)
        parser.add_argument("--port", type=int, default=settings.RELAY_SMTP_PORT)
        parser.add_argument("--submission-port", type=int, default=settings.RELAY_SUBMISSION_PORT,
                            help="the sandboxes' submission port (docs/sandbox.md); 0: none")
        parser.add_argument("--reuse-port", action="store_true",
                            help="let other runsmtp processes listen on the same port (SO_REUSEPORT): start one per "
                                 "core under your process manager to use more cores")

    def handle(self, *args, host: str, port: int, reuse_port: bool, submission_port: int, **options):
        if reuse_port and port == 0:
            raise CommandError("--port 0 picks a port per process; give a port to share it")
        self.stdout.write(f"Relay SMTP on {host}:{port} for {', '.join(settings.RELAY_DOMAINS)}"
                          f"{f'; submission on {submission_port}' if submission_port else ''}"
                          f"{' (port shared: SO_REUSEPORT)' if reuse_port else ''}")
        self.stdout.flush()
        try:
            run_forever(host, port, reuse_port=reuse_port, submission_port=submission_port or None)
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
