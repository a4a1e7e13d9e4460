"""The held routes' HTTP: `GET …/messages?wait=S` and the event stream `GET …/events`, async
views over relay.live (the loop, its wake-ups and the cap on open waits), each answering
the API's error body for what it meets."""
from django.http import HttpResponseNotAllowed, JsonResponse, StreamingHttpResponse
from rest_framework import exceptions

from accounts.inputs import whole_number
from api.authentication import (WAITS, BearerAuthentication, InsufficientScope, Principal, insufficient_scope,
                                scope_covers)
from api.errors import error_body, json_error_response
from api.fields import validated
from api.serializers import EventsQuerySerializer, MailboxSerializer, MessageSummarySerializer, WaitQuerySerializer
from core.pools import in_pool
from mailboxes.errors import Forbidden, RelayError
from mailboxes.models import MailboxStatus
from relay import live, reading


def _principal_of(request) -> Principal:
    result = BearerAuthentication().authenticate(request)
    if result is None:
        raise exceptions.NotAuthenticated("Authentication credentials were not provided.")
    scope_covers(result[0], WAITS)
    return result[0]


def error_response(exc: Exception, request) -> JsonResponse:
    """The error body (docs/api.md, "Errors") for what the async views can meet."""
    if isinstance(exc, exceptions.APIException) and not isinstance(exc, exceptions.ValidationError):
        response = JsonResponse(error_body(exc.status_code, str(exc.detail)), status=exc.status_code)
        if exc.status_code == 401:
            response["WWW-Authenticate"] = BearerAuthentication().authenticate_header(request)
        if isinstance(exc, InsufficientScope):
            response["WWW-Authenticate"] = insufficient_scope(exc.scope)
        return response
    return json_error_response(exc)


# --- GET /mailboxes/{id}/messages?wait=S&after=MID -----------------------------------------------
async def wait_for_messages(request, mailbox_id):
    """Messages after `after` matching the filters, newest first, held up to `wait` seconds
    until there is one (410 if the mailbox expires meanwhile, 429 past the open waits)."""
    try:
        caller = await in_pool(_principal_of)(request)
        query = validated(WaitQuerySerializer, request.GET)
        search = WaitQuerySerializer.filters(query)
        # Checked once, here; each look then only asks for ids above it.
        after = search.pop("after") or 0
        start = (query["page"] - 1) * query["page_size"]
        await in_pool(live.open_fresh)(caller, mailbox_id, after)
        mailbox, results = await live.wait_until_found(
            caller=caller, authenticate=lambda: _principal_of(request), mailbox_id=mailbox_id, seconds=query["wait"],
            look=lambda mailbox: live.messages_after(mailbox, after, search, lambda rows: (
                MessageSummarySerializer.represent_many(rows[start:start + query["page_size"]]))))
        count = await in_pool(live.messages_after)(mailbox, after, search, lambda rows: rows.count())
        return JsonResponse({"count": count, "next": None, "previous": None, "results": results})
    except (exceptions.APIException, RelayError) as exc:
        return error_response(exc, request)


# --- GET /mailboxes/{id}/events ----------------------------------------------------------------------
def _summaries(mailbox, after: int) -> list[tuple[int, dict]]:
    """Each message of the stream as the API's message list shows it."""
    items = live.messages_after(mailbox, after, {}, lambda rows: MessageSummarySerializer.represent_many(
        rows.order_by("id")[:live.BATCH]))
    return [(item["id"], item) for item in items]


def _ended(caller, mailbox_id) -> dict:
    """What the closing `expired` event says (the mailbox as a client sees it now)."""
    try:
        return MailboxSerializer.represent(reading.mailbox_open(caller=caller, mailbox_id=mailbox_id, live=False))
    except RelayError:
        return {"id": str(mailbox_id), "status": MailboxStatus.DELETED}


async def mailbox_events(request, mailbox_id):
    """text/event-stream: `message` events (id = the message's id), heartbeats, and
    `expired`, which closes it. `Last-Event-ID` resumes after that message."""
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    try:
        caller = await in_pool(_principal_of)(request)
        validated(EventsQuerySerializer, request.GET)
        after, place = await live.events_open(caller=caller, mailbox_id=mailbox_id, after=whole_number(
            request.headers.get("Last-Event-ID", "").strip(), field="Last-Event-ID"))
    except (exceptions.APIException, RelayError) as exc:
        return error_response(exc, request)

    def authenticate():
        try:
            return _principal_of(request)
        except exceptions.APIException as exc:  # revoked, suspended or out of scope since: the stream ends
            raise Forbidden(str(exc.detail)) from exc

    response = StreamingHttpResponse(live.events(
        authenticate=authenticate, mailbox_id=mailbox_id, after=after, place=place, look=_summaries,
        ended=lambda: _ended(caller, mailbox_id)), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass events through at once
    return response
