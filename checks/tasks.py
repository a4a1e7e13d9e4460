from celery import shared_task

from checks import links


@shared_task(acks_late=True, soft_time_limit=links.lapse_seconds() - 30, time_limit=links.lapse_seconds())
def check_links(message_id: int, started_at: str) -> int:
    """Check a message's links (checks.links.links_check_run)."""
    return links.links_check_run(message_id, started_at)
