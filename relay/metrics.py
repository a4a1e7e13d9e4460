"""The counters every process keeps for /metrics, written per host and process under
PROMETHEUS_MULTIPROC_DIR (set before this is imported) and summed by api/metrics.py."""
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
