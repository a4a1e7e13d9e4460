"""Whether a message's links answer: asked for by the API or MCP, carried out by a Celery
task (checks.tasks.check_links), each request under the webhooks' address rule."""
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from urllib.parse import urljoin

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from checks import bounds
from checks.models import LinkCheck
from core import http, task_names
from mailboxes.errors import NotFound, RateLimited
from mailboxes.models import Message

logger = logging.getLogger(__name__)

MAX_LINKS = 50
MAX_REDIRECTS = 5
REDIRECTS = {301, 302, 303, 307, 308}


def lapse_seconds() -> int:
    """How long a queued check may take before a reader queues it again (its task lost)."""
    rounds = math.ceil(MAX_LINKS / settings.RELAY_LINK_CHECK_CONCURRENCY)
    return rounds * settings.RELAY_LINK_CHECK_TIMEOUT_SECONDS + 60


def links_check_start(message: Message, *, caller: str | None = None) -> LinkCheck:
    """Queue a fresh check of the message's links, replacing any earlier result; while one is
    under way, that one (asking again sends no more requests to the links' sites). Two
    requests at once queue one check: the row's insert, or its conditional update, is won
    by one of them. For a `caller` (checks.bounds.caller_of), a fresh check counts against
    its bounds: RateLimited past them."""
    started_at = timezone.now()
    under_way = Q(status=LinkCheck.Status.PENDING, started_at__gte=started_at - timedelta(seconds=lapse_seconds()))
    if caller is not None:
        current = LinkCheck.objects.filter(under_way, message=message).first()
        if current is not None:
            return current
        _bounds_take(message, caller)
    fresh = {"status": LinkCheck.Status.PENDING, "links": [], "started_at": started_at, "finished_at": None}
    check, created = LinkCheck.objects.get_or_create(message=message, defaults=fresh)
    if not created:
        if not LinkCheck.objects.filter(message=message).exclude(under_way).update(**fresh):
            return LinkCheck.objects.get(message=message)
        check.refresh_from_db()
    transaction.on_commit(lambda: _queue(message.id, started_at))
    return check


def _bounds_take(message: Message, caller: str) -> None:
    """At most RELAY_LINK_CHECKS_AT_ONCE checks under way for the caller's account (or its
    lone mailbox), and RELAY_LINK_CHECKS_PER_MINUTE started."""
    mailbox = message.mailbox
    mine = Q(message__mailbox__owner_id=mailbox.owner_id) if mailbox.owner_id else Q(message__mailbox_id=mailbox.id)
    limit = settings.RELAY_LINK_CHECKS_AT_ONCE
    lapse = timezone.now() - timedelta(seconds=lapse_seconds())
    if LinkCheck.objects.filter(mine, status=LinkCheck.Status.PENDING, started_at__gte=lapse)[:limit].count() >= limit:
        raise RateLimited(f"At most {limit} link checks at once per account; try again when one is done.",
                          retry_after=10)
    bounds.rate_take(kind="link", caller=caller, per_minute=settings.RELAY_LINK_CHECKS_PER_MINUTE)


def _queue(message_id: int, started_at) -> None:
    try:
        current_app.send_task(task_names.CHECK_LINKS, args=[message_id, started_at.isoformat()])
    except Exception:
        logger.exception("could not queue the link check of message %s; the next read queues it again", message_id)


def links_check_get(message: Message) -> LinkCheck:
    """The message's latest check; one whose task was lost is queued again."""
    check = LinkCheck.objects.filter(message=message).first()
    if check is None:
        raise NotFound("No link check of this message yet: POST to this address to start one.")
    if check.status == LinkCheck.Status.PENDING and (
            check.started_at < timezone.now() - timedelta(seconds=lapse_seconds())):
        logger.warning("the link check of message %s was not done in time; queued again", message.id)
        check = links_check_start(message)
    return check


def links_of(message_id: int) -> list[str]:
    links = (Message.objects.filter(id=message_id).values_list("content__links", flat=True).first()) or []
    return [link["url"] for link in links[:MAX_LINKS]]


def _probe(url: str, method: str, *, until: float) -> tuple[int, str]:
    """One HEAD or GET of `url` within what is left of the link's time, no byte of the body
    read: (status, Location or "")."""
    answer = http.exchange(method, url, seconds=until - time.monotonic(),
                                headers={"User-Agent": "Relay link check", "Accept": "*/*"},
                                allow_private=settings.RELAY_LINK_CHECK_ALLOW_PRIVATE)
    return answer.status, answer.headers.get("Location", "")


def link_check(url: str) -> dict:
    """One link: HEAD (then GET when HEAD is refused), up to MAX_REDIRECTS redirects each
    judged again, all within RELAY_LINK_CHECK_TIMEOUT_SECONDS."""
    seconds = settings.RELAY_LINK_CHECK_TIMEOUT_SECONDS
    until = time.monotonic() + seconds
    result = {"url": url, "status_code": None, "final_url": url, "redirects": 0, "error": None, "ok": False}
    current = url
    try:
        while True:
            status, location = _probe(current, "HEAD", until=until)
            if status >= 400 and status not in (404, 410):  # refused: a GET is what a reader's browser sends
                status, location = _probe(current, "GET", until=until)
            result.update(status_code=status, final_url=current)
            if status not in REDIRECTS or not location:
                break
            if result["redirects"] == MAX_REDIRECTS:
                result["error"] = f"more than {MAX_REDIRECTS} redirects"
                break
            current = urljoin(current, location)
            result["redirects"] += 1
            result["final_url"] = current
    except http.PrivateAddress as exc:
        result["error"] = str(exc)
    except http.DeliveryTimedOut:
        result["error"] = f"no answer within {seconds} s"
    except http.TransportFailed as exc:
        result["error"] = str(exc)
    result["ok"] = result["error"] is None and result["status_code"] is not None and 200 <= result["status_code"] < 300
    return result


def links_check_urls(urls: list[str]) -> list[dict]:
    """Each URL's result, in order, RELAY_LINK_CHECK_CONCURRENCY at once."""
    with ThreadPoolExecutor(max_workers=settings.RELAY_LINK_CHECK_CONCURRENCY) as pool:
        return list(pool.map(link_check, urls))


def links_check_run(message_id: int, started_at: str) -> int:
    """The task's work: check every link, a few at once, and keep the result if this is
    still the newest request. The number of links checked."""
    results = links_check_urls(links_of(message_id))
    kept = LinkCheck.objects.filter(message_id=message_id, started_at=started_at).update(
        status=LinkCheck.Status.DONE, links=results, finished_at=timezone.now())
    if kept:
        logger.info("checked %d links of message %s: %d answered", len(results), message_id,
                    sum(result["ok"] for result in results))
    return len(results)


def check_answer(check: LinkCheck) -> dict:
    return {"status": check.status, "links": check.links}
