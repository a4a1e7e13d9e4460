"""The operator's admin site: Django's, with a first screen that says how the system is
doing (docs/architecture.md). Installed as the default site by api.apps.RelayAdminConfig, so every
app's `@admin.register` lands here."""
from django.contrib import admin
from django.urls import reverse

from api.gauges import operations_state

# The chart's drawing box, in SVG units (it scales to the page's width).
CHART_WIDTH, CHART_HEIGHT, CHART_TOP = 600, 120, 8


class RelayAdminSite(admin.AdminSite):
    site_header = site_title = "Relay administration"
    index_title = "How Relay is doing"
    index_template = "admin/relay_index.html"
    # Without the side navigation, the lists (the dead letters above all) fit a 1280 px
    # window without scrolling sideways.
    enable_nav_sidebar = False

    def index(self, request, extra_context=None):
        return super().index(request, {**(extra_context or {}), "dashboard": dashboard(operations_state())})


def dashboard(state: dict) -> dict:
    """The figures of the first screen, each with the filtered list it opens."""
    mailboxes = reverse("admin:mailboxes_mailbox_changelist")
    cleanups = reverse("admin:expiry_cleanup_changelist")
    figures = [
        ("Active mailboxes", state["mailboxes"]["active"], f"{mailboxes}?status__exact=active", "ok"),
        ("Expired mailboxes", state["mailboxes"]["expired"], f"{mailboxes}?status__exact=expired", "ok"),
        ("Owed cleanups", state["owed_cleanups"], f"{cleanups}?cleanup_state=owed", "ok"),
        ("Oldest owed cleanup", _age(state["oldest_owed_cleanup_seconds"]), f"{cleanups}?cleanup_state=owed",
         "warn" if state["oldest_owed_cleanup_seconds"] > 300 else "ok"),
        ("Dead cleanups", state["cleanups"]["dead"], f"{cleanups}?cleanup_state=dead",
         "bad" if state["cleanups"]["dead"] else "ok"),
        ("Dead webhook deliveries", state["deliveries"]["failed"],
         reverse("admin:webhooks_webhookdelivery_changelist") + "?status__exact=failed",
         "bad" if state["deliveries"]["failed"] else "ok"),
        ("Failed mails", state["outbox"]["failed"], reverse("admin:relay_outboxmail_changelist") + "?status__exact=failed",
         "bad" if state["outbox"]["failed"] else "ok"),
    ]
    per_minute = state["cleanups_per_minute"]
    return {
        "figures": [{"label": label, "value": f"{value:,}" if isinstance(value, int) else value, "url": url,
                     "tone": tone} for label, value, url, tone in figures],
        "read_at": state["read_at"],
        "chart": _chart(per_minute),
        "done_last_hour": sum(minute["done"] for minute in per_minute),
        "dead_last_hour": sum(minute["dead"] for minute in per_minute),
    }


def _age(seconds: float) -> str:
    if not seconds:
        return "none owed"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _chart(per_minute: list[dict]) -> dict:
    """One stacked bar per minute, done below dead, scaled to the busiest minute."""
    busiest = max((minute["done"] + minute["dead"] for minute in per_minute), default=0) or 1
    slot = CHART_WIDTH / max(len(per_minute), 1)
    scale = (CHART_HEIGHT - CHART_TOP) / busiest
    bars = []
    for i, minute in enumerate(per_minute):
        done_height, dead_height = minute["done"] * scale, minute["dead"] * scale
        bars.append({
            "x": round(i * slot + 1, 1), "width": round(slot - 2, 1),
            "done_y": round(CHART_HEIGHT - done_height, 1), "done_height": round(done_height, 1),
            "dead_y": round(CHART_HEIGHT - done_height - dead_height, 1), "dead_height": round(dead_height, 1),
            "title": f"{minute['minute']:%H:%M} UTC: {minute['done']} done, {minute['dead']} dead",
        })
    return {"bars": bars, "width": CHART_WIDTH, "height": CHART_HEIGHT, "busiest": busiest}
