import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from relay.smtp import run_forever


class Command(BaseCommand):
    help = "Run Relay's inbound SMTP server (RELAY_SMTP_HOST:RELAY_SMTP_PORT) until SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.RELAY_SMTP_HOST)
        parser.add_argument("--port", type=int, default=settings.RELAY_SMTP_PORT)
        parser.add_argument("--processes", type=int, default=None,
                            help="server processes on the one port (SO_REUSEPORT); default: one per core on "
                                 "PostgreSQL, 1 on SQLite (one writer at a time)")

    def handle(self, *args, host: str, port: int, processes: int | None, **options):
        if processes is None:
            processes = 1 if connection.vendor == "sqlite" else (os.cpu_count() or 1)
        if processes < 1:
            raise CommandError("--processes must be at least 1")
        if processes > 1 and port == 0:
            raise CommandError("--port 0 picks a port per process; give a port to run several processes")
        self.stdout.write(f"Relay SMTP on {host}:{port} for {', '.join(settings.RELAY_DOMAINS)}, "
                          f"{processes} process{'es' if processes > 1 else ''}")
        self.stdout.flush()
        try:
            run_forever(host, port, processes=processes)
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
