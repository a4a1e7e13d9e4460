"""Probes for orchestrators (docs/architecture.md), at the site root and open to anyone.

/healthz: the process is up and serving. /readyz: the database and the broker answer,
each within a short timeout; 503 naming what does not, so a load balancer stops sending
traffic to a web process that could not do its work."""
import logging

from celery import current_app
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)

# A readiness probe must answer before the orchestrator's own timeout (often 1 to 5 s).
BROKER_TIMEOUT_SECONDS = 2


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _broker() -> None:
    with current_app.connection_for_write() as broker:
        broker.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_SECONDS)


CHECKS = {"database": _database, "broker": _broker}


@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request):
    failing = {}
    for name, check in CHECKS.items():
        try:
            check()
        except Exception as exc:
            failing[name] = f"{type(exc).__name__}: {exc}"[:300]
    if failing:
        logger.warning("not ready: %s", "; ".join(f"{name}: {error}" for name, error in failing.items()))
        return JsonResponse({"status": "unavailable", "failing": failing,
                             "message": f"Not ready: {', '.join(failing)} did not answer."}, status=503)
    return JsonResponse({"status": "ok", "checks": {name: "ok" for name in CHECKS}})
