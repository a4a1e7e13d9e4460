"""GET /metrics (docs/architecture.md), Prometheus' text format.

Two kinds of figures: the counters every process keeps (relay/metrics.py: backend calls,
limiter waits, task runs), summed over the host's processes in multiprocess mode; and
gauges of what the database holds (api/gauges.py), read from the shared cache."""
import hmac
import os

from django.conf import settings
from django.core import checks
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from api.gauges import operations_state


class StateCollector:
    """The database's counts as gauges, one family per table and state."""

    def collect(self):
        state = operations_state()
        families = [
            ("relay_mailboxes", "Mailboxes by status.", "status", state["mailboxes"]),
            ("relay_cleanups", "Mailbox cleanups by state (pending and running are owed; dead are dead letters).",
             "state", state["cleanups"]),
            ("relay_outbox_mails", "Outgoing mails by status (failed are dead letters).", "status", state["outbox"]),
            ("relay_webhook_deliveries", "Webhook deliveries by status (failed are dead letters).", "status",
             state["deliveries"]),
        ]
        for name, documentation, label, counts in families:
            family = GaugeMetricFamily(name, documentation, labels=[label])
            for value, n in sorted(counts.items()):
                family.add_metric([value], n)
            yield family
        yield GaugeMetricFamily("relay_cleanup_oldest_owed_age_seconds",
                                "How long the longest-waiting owed cleanup has waited since it was queued (0: none owed).",
                                value=state["oldest_owed_cleanup_seconds"])
        yield GaugeMetricFamily("relay_search_words_owed",
                                "Stored messages whose search words a worker has yet to write (a search writes its own first).",
                                value=state["words_owed"])
        yield GaugeMetricFamily("relay_state_read_timestamp_seconds",
                                "When the gauges above were read from the database (they are cached).",
                                value=state["read_at"].timestamp())


class ProcessCounters:
    """This process's own counters, when there is no multiprocess directory to sum."""

    def collect(self):
        yield from REGISTRY.collect()


@require_GET
def metrics(request):
    if settings.RELAY_METRICS_TOKEN:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), settings.RELAY_METRICS_TOKEN.encode()):
            return HttpResponse("Unauthorized: /metrics wants the bearer token RELAY_METRICS_TOKEN.\n",
                                status=401, content_type="text/plain")
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(ProcessCounters())
    registry.register(StateCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@checks.register(checks.Tags.security, deploy=True)
def metrics_token_check(app_configs, **kwargs) -> list:
    """`check --deploy`: /metrics is readable by anyone without RELAY_METRICS_TOKEN."""
    if settings.RELAY_METRICS_TOKEN:
        return []
    return [checks.Warning(
        "RELAY_METRICS_TOKEN is not set, so /metrics is public: it tells anyone how many mailboxes, "
        "cleanups and deliveries there are.", hint="Set RELAY_METRICS_TOKEN and give Prometheus the same token.",
        id="relay.W001")]
