"""The counters every Relay process keeps for /metrics (docs/architecture.md; api/metrics.py serves
them with the gauges read from the database).

With PROMETHEUS_MULTIPROC_DIR set (run.sh and docker-compose set it), prometheus_client
writes each process's counters to files there, and /metrics sums the files of every
process on the host: gunicorn's workers, Celery's pool processes, the mailer. The
variable must be set before this module is first imported, which the environment does.

Files are named by host and process id, not the process id alone: docker-compose's
containers share one directory, and each container numbers its processes from 1."""
import os
import socket

from prometheus_client import Counter, values

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: f"{socket.gethostname()}-{os.getpid()}")

BACKEND_CALLS = Counter("relay_backend_calls", "Provisions and deprovisions asked of the mail backend, by outcome.",
                        ["operation", "outcome"])
LIMITER_WAITS = Counter("relay_backend_limiter_waits",
                        "Backend calls that had to wait for a slot of Relay's shared limit.")
LIMITER_GAVE_UP = Counter("relay_backend_limiter_gave_up",
                          "Backend calls that found no slot within their wait; their task came back later.")
TASKS = Counter("relay_tasks", "Celery task runs, by task name and outcome.", ["task", "outcome"])
MAILSERVER_REQUESTS = Counter("relay_mailserver_requests",
                              "Requests the mail reader and the Cyrus backend sent the mail server, by kind "
                              "(imap: one admin session; jmap: one API request; blob: one download).", ["kind"])
MAILSERVER_STORED = Counter("relay_mailserver_messages_stored", "Messages read from the mail server and stored.")
