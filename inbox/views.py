"""The web inbox's pages (docs/inbox.md): each parses the form, calls the entry the API and
the MCP tools call (relay.reading, the mailbox, outbox and account services) as the
browser's caller, and renders. Nothing here builds an API request."""
import functools
import logging
import uuid

from django.conf import settings
from django.db.models import Q
from django.http import (Http404, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse,
                         StreamingHttpResponse)
from django.shortcuts import render
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.http import content_disposition_header, url_has_allowed_host_and_scheme, urlencode
from django.utils.translation import gettext as _
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from oauth2_provider.exceptions import FatalClientError
from oauth2_provider.models import get_application_model
from oauth2_provider.views import AuthorizationView

from accounts import services as accounts
from accounts.credentials import api_key_revoke
from accounts.oauth import consent_form_action
from accounts.oauth_apps import oauth_app_revoke, oauth_apps_of
from accounts.errors import Forbidden, InvalidRequest, RelayError
from accounts.inputs import BIGINT_MAX, whole_number
from checks import html_support, message_checks
from core.client_address import client_group_of
from core.pools import in_pool
from core.rate_limits import rate_limit_take
from domains.models import Domain, DomainStatus
from inbox import sandbox, session
from inbox.mail_html import frame_hint, policy, shown_html_of
from mailboxes import faults, lifecycle
from mailboxes.errors import NotFound, RateLimited
from mailboxes.mail_format import lineage_of
from mailboxes.messages import message_mark_read
from mailboxes.models import MailboxStatus, shown_sender
from mailboxes.threads import thread_messages
from relay import live, reading
from relay.backends import get_backend
from relay.error_table import domain_error, retry_after
from relay.inbound.attachments import (SAFETY_HEADERS, attachment_of, safe_filename, served_content_type,
                                       without_format_characters)
from relay.models import OutboxMail
from relay.outbox import account_mail
from relay.outbox.delivery import delivery_of
from relay.outbox.outbound import forward_queue, reply_queue, sending_checked

logger = logging.getLogger(__name__)

LISTED = 50
TABS = ("html", "text", "headers", "raw", "attachments", "thread", "checks")
# The Checks tab's sections fetched on their own, and the share of a message's feature uses
# caniemail must have tested in a family of clients for its score to be shown.
CHECK_SECTIONS = ("render", "spam", "links")
# The Checks tab's sections the page fetches once it is shown (`?render=1&spam=1` without script).
FETCHED_AFTER = ("render", "spam")
ENOUGH_TESTED = 0.5
# The pages' own policy: their script and style files, the mail's frame from this origin,
# the event stream; nothing inline, and no page may frame them.
PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "frame-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; "
               "frame-ancestors 'none'")


def page(view):
    """A page: in the browser's language (English or Spanish), under PAGE_POLICY, a domain
    error shown as a page with its status."""
    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        language = translation.get_language_from_request(request)
        with translation.override(language):  # this thread serves the API next: never left active
            request.LANGUAGE_CODE = language
            try:
                response = view(request, *args, **kwargs)
            except (RelayError, Http404) as exc:
                status, body = domain_error(exc) if isinstance(exc, RelayError) else (404, {"message": _("Not found.")})
                # What a field was refused for says more than "The request is not valid."
                message = " ".join(f"{name}: {' '.join(reasons)}" for name, reasons in body.get("fields", {}).items())
                response = render(request, "inbox/problem.html",
                                  {"status": status, "message": message or body["message"]}, status=status)
        response.setdefault("Content-Security-Policy", PAGE_POLICY)
        response.setdefault("Referrer-Policy", "same-origin")
        response["Content-Language"] = language
        return response
    return wrapped


def _base_url(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")


def _caller_mailbox(request, mailbox_id, *, live: bool = False) -> tuple:
    """(caller, mailbox) for this browser, as the API opens it; NotFound for a stranger."""
    caller = session.caller_for(request, mailbox_id)
    if caller is None:
        raise NotFound("No such mailbox.")
    return caller, reading.mailbox_open(caller=caller, mailbox_id=mailbox_id, live=live, fresh=True)


def sender_badge(*, direction: str, authenticated: bool) -> tuple[str, bool]:
    """(the words, whether it passed) that name a message's sender verdict, the same in the
    list's badge and on the message's page."""
    if direction == "out":
        return _("sent"), False
    return (_("verified sender"), True) if authenticated else (_("unverified"), False)


def _rows(mailbox, words: str = "", after: int = 0, *, oldest_first: bool = False, rcpt: str = "") -> list[dict]:
    """The newest LISTED messages of `mailbox` (matching `words` and, in a sandbox, the
    envelope recipient `rcpt`; newer than `after`), each as inbox/templates/inbox/rows.html
    shows a row: its words and times made here, since a filter or a tag per row in the
    template cost most of the page's time. A sandbox's rows name their envelope recipients."""
    with reading.messages_read(caller=None, mailbox=mailbox, search={"words": words, "rcpt": rcpt}) as matching:
        matching = matching.filter(id__gt=after) if after else matching
        found = list((matching.order_by("id") if oldest_first else matching).values_list(
            "id", "from_header", "envelope_from", "subject", "received_at", "is_read", "authenticated", "direction",
            "content__codes", *(("rcpt_to", "to_header", "cc_header") if mailbox.sandbox else ()))[:LISTED])
    prefix = reverse("inbox-mailbox", args=[mailbox.id])
    no_sender, no_subject = _("(no sender)"), _("(no subject)")
    rows = []
    for message_id, from_header, envelope_from, subject, received_at, is_read, authenticated, direction, codes, \
            *envelope in found:
        sender = shown_sender(from_header, envelope_from)
        badge, passed = sender_badge(direction=direction, authenticated=authenticated)
        row = {"id": message_id, "href": f"{prefix}/{message_id}", "css": "row" if is_read else "row unread",
               "unread": not is_read, "sender": sender or no_sender, "subject": subject or no_subject,
               "iso": received_at.isoformat(), "time": received_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
               "badge_class": "badge pass" if passed else "badge", "badge": badge, "code": (codes or [""])[0]}
        if envelope and envelope[0]:
            recipients = sandbox.envelope_recipients(*envelope)
            row["rcpt"] = [{**recipient, "href": f"{prefix}?{urlencode({'rcpt': recipient['address']})}"}
                           for recipient in recipients[:sandbox.ROW_RECIPIENTS]]
            row["rcpt_more"] = len(recipients) - len(row["rcpt"])
        rows.append(row)
    return rows


@page
def not_found(request, exception=None):
    """A path nothing answers (handler404), as the inbox's own page; outside the pages'
    paths api.middleware.JsonErrorsMiddleware answers the API's error body instead."""
    return render(request, "inbox/problem.html", {"status": 404, "message": _("There is no page at this address.")},
                  status=404)


def favicon(request):
    """Browsers ask /favicon.ico of every page, the API's docs and the admin's included."""
    response = HttpResponseRedirect(static("inbox/favicon.svg"))
    response["Cache-Control"] = "max-age=86400"
    return response


@page
def csrf_failure(request, reason: str = ""):
    """A form without its CSRF token, or from another site (CSRF_FAILURE_VIEW)."""
    return render(request, "inbox/problem.html", {"status": 403, "message": _(
        "This form has expired or did not come from this site. Go back, reload the page and try again.")}, status=403)


# --- home, sign in, the account's mailboxes -------------------------------------------------
@require_GET
@page
def home(request):
    caller = session.account_caller(request)
    return render(request, "inbox/home.html", {
        "signed_in": caller.owner if caller else None, "mailboxes": session.anonymous_mailboxes(request)})


@require_POST
@page
def anonymous_new(request):
    _limited(request, "anon_create", _("Too many mailboxes from this address; try again later."))
    mailbox, token = lifecycle.mailbox_create(backend=get_backend(), caller=None, local_part=None, domain=None,
                                              ttl_ms=None, sandbox=request.POST.get("sandbox") == "1")
    response = _to_new_mailbox(request, mailbox)
    session.keep_token(request, response, mailbox.id, token)
    return response


def _to_new_mailbox(request, mailbox) -> HttpResponseRedirect:
    """To a new mailbox's page; a sandbox's shows its SMTP password, this once."""
    if not mailbox.sandbox:
        return HttpResponseRedirect(reverse("inbox-mailbox", args=[mailbox.id]))
    response = HttpResponseRedirect(reverse("inbox-mailbox", args=[mailbox.id]) + "#smtp")
    session.show_password_once(request, response, mailbox.id, mailbox.smtp_password)
    return response


def _limited(request, scope: str, message: str | None = None) -> None:
    """The API's limit of `scope` per client address, counted with the API's tries."""
    retry_after = rate_limit_take(scope=scope, ident=client_group_of(request),
                                  rate=settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][scope])
    if retry_after:
        raise RateLimited(message or _("Too many tries from this address; try again later."), retry_after=retry_after)


def _after_sign_in(request) -> str:
    """Where a sign-in leads: back to the page that asked for it (the consent page), if it
    is one of this site's, else the account's mailboxes."""
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    if wanted and url_has_allowed_host_and_scheme(wanted, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return wanted
    return reverse("inbox-mailboxes")


@require_http_methods(["GET", "POST"])
@page
def sign_in(request):
    context = {"step": "email"}
    if request.method == "POST":
        form = request.POST.get("form")
        email = request.POST.get("email", "").strip()
        _limited(request, "sign_in" if form == "email" else "sign_in_check")
        try:
            if form == "email" and email:
                account_mail.account_sign_in_request(email=email)
                context = {"step": "code", "email": email}
            elif form == "code":
                account = accounts.sign_in_by_code(email=email, code=request.POST.get("code", ""))
                session.sign_in(request, account)
                return HttpResponseRedirect(_after_sign_in(request))
            elif form == "key":
                try:
                    found = session.caller_for_key(request.POST.get("key", "").strip())
                    problem = _("That is not a live API key of an active account.")
                except Forbidden as refused:  # the key is right, its account may not act: the API's words
                    found, problem = None, refused.message
                if found is None:
                    context = {"step": "email", "key_problem": problem}
                else:
                    session.sign_in(request, found.owner, api_key_id=found.api_key_id)
                    return HttpResponseRedirect(_after_sign_in(request))
        except RelayError as exc:
            context = {"step": "code", "email": email, "problem": exc.message}
    context["next"] = request.POST.get("next") or request.GET.get("next") or ""
    return render(request, "inbox/sign_in.html", context, status=400 if "problem" in context else 200)


@require_http_methods(["GET", "POST"])
@page
def sign_in_link(request, link_token: str):
    """A mailed link: the GET only shows a button (mail scanners open links); the POST signs in."""
    if request.method == "POST":
        session.sign_in(request, accounts.sign_in_by_link(link_token=link_token))
        return HttpResponseRedirect(reverse("inbox-mailboxes"))
    return render(request, "inbox/sign_in_link.html", {})


@require_POST
@page
def sign_out(request):
    session.sign_out(request)
    return HttpResponseRedirect(reverse("home"))


def _signed_in(request):
    caller = session.account_caller(request)
    if caller is None:
        raise Http404()
    return caller


@require_http_methods(["GET", "POST"])
@page
def account_mailboxes(request):
    caller = session.account_caller(request)
    if caller is None:
        return HttpResponseRedirect(reverse("inbox-sign-in"))
    problem = None
    if request.method == "POST":
        try:
            minutes = whole_number(request.POST.get("ttl_minutes", "").strip(), field="ttl_minutes",
                                   high=BIGINT_MAX // 60_000)
            ttl_ms = None if minutes is None else minutes * 60_000
            mailbox, _token = lifecycle.mailbox_create(backend=get_backend(), caller=caller,
                                                       local_part=request.POST.get("local_part", "").strip() or None,
                                                       domain=request.POST.get("domain", "").strip() or None,
                                                       ttl_ms=ttl_ms, sandbox=request.POST.get("sandbox") == "1")
            return _to_new_mailbox(request, mailbox)
        except RelayError as exc:
            problem = exc.message
    mailboxes = reading.mailbox_list(caller=caller, include_expired=True)[:200]
    domains = [*settings.RELAY_DOMAINS, *Domain.objects.filter(owner=caller.owner, status=DomainStatus.VERIFIED)
               .values_list("name", flat=True)]
    return render(request, "inbox/mailboxes.html", {
        "signed_in": caller.owner, "mailboxes": mailboxes, "domains": domains, "problem": problem,
        "sandbox_asked": request.method == "POST" and request.POST.get("sandbox") == "1"},
        status=400 if problem else 200)


# --- a mailbox ------------------------------------------------------------------------------
@require_GET
@page
def mailbox_page(request, mailbox_id: uuid.UUID):
    caller, mailbox = _caller_mailbox(request, mailbox_id)
    return _mailbox_page(request, caller, mailbox)


def _mailbox_page(request, caller, mailbox, *, rule_form: dict | None = None, rule_problem: RelayError | None = None):
    """A mailbox's page; a sandbox's with its SMTP settings, snippets and fault rules (the
    fault editor's refused form and its error, when it was refused: a 400)."""
    words = request.GET.get("q", "").strip()[:200]
    rcpt = request.GET.get("rcpt", "").strip()
    rcpt = reading.search_text("rcpt", rcpt) if rcpt and mailbox.sandbox else ""
    live = mailbox.status == MailboxStatus.ACTIVE
    context = {
        "mailbox": mailbox, "rows": _rows(mailbox, words, rcpt=rcpt), "q": words, "rcpt": rcpt,
        "live": live, "signed_in": caller.owner, "smtp_port": settings.RELAY_SMTP_PORT,
        "smtp_host": request.get_host().rsplit(":", 1)[0] if request.get_host().count(":") == 1 else request.get_host(),
        "seconds_left": max(0, int((mailbox.expires_at - timezone.now()).total_seconds()))}
    password = None
    if mailbox.sandbox:
        password = session.password_to_show(request, mailbox) if live else None
        smtp = lifecycle.smtp_settings(mailbox=mailbox, password=password or sandbox.password_placeholder())
        context |= {
            "smtp": smtp, "password": password, "tls": smtp["security"] == "starttls",
            "snippets": sandbox.snippets(smtp, tls=smtp["security"] == "starttls") if smtp["port"] else [],
            "rules": sandbox.rules_shown(faults.faults_get(mailbox=mailbox)), "stages": sandbox.stage_choices(),
            "rule_form": rule_form or {}, "rule_field": getattr(rule_problem, "field", None) or "rules",
            "rule_problem": rule_problem.message if rule_problem else None}
    response = render(request, "inbox/mailbox.html", context, status=400 if rule_problem else 200)
    session.password_forget(request, response, mailbox.id)  # a reload shows it no more
    if password:
        response["Cache-Control"] = "no-store"  # nor does the browser's cache keep it
    return response


async def mailbox_events(request, mailbox_id: uuid.UUID):
    """The mailbox's live list: its event stream (relay.live) for this browser, each
    `message` event carrying the row the page draws (inbox/templates/inbox/rows.html, in
    the browser's language), so a new mail costs the page no request of its own. `?after=`
    is the newest message the page drew: the stream starts after it (a browser's
    EventSource sends no Last-Event-ID on its first connection, and sends it on a
    reconnection)."""
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    language = translation.get_language_from_request(request)

    def authenticate():
        caller = session.caller_for(request, mailbox_id)
        if caller is None:  # signed out, or the key it came from revoked, since the page opened
            raise Forbidden("This browser may not open this mailbox.")
        return caller

    def rows(mailbox, after: int) -> list[tuple[int, dict]]:
        with translation.override(language):
            return [(row["id"], {"id": row["id"], "row": render_to_string("inbox/rows.html", {"rows": [row]})})
                    for row in _rows(mailbox, after=after, oldest_first=True)]

    try:
        caller = await in_pool(session.caller_for)(request, mailbox_id)
        if caller is None:
            raise NotFound("No such mailbox.")
        resume = request.headers.get("Last-Event-ID", "").strip()
        after = (whole_number(resume, field="Last-Event-ID") if resume
                 else whole_number(request.GET.get("after"), field="after"))
        after, place = await live.events_open(caller=caller, mailbox_id=mailbox_id, after=after)
    except RelayError as exc:
        status, body = domain_error(exc)
        response = HttpResponse(body["message"], status=status, content_type="text/plain; charset=utf-8")
        if retry_after(exc) is not None:
            response["Retry-After"] = str(retry_after(exc))
        return response
    response = StreamingHttpResponse(live.events(
        authenticate=authenticate, mailbox_id=mailbox_id, after=after, place=place, look=rows,
        ended=lambda: {"id": str(mailbox_id)}), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass events through at once
    return response


@require_POST
@page
def mailbox_renew(request, mailbox_id: uuid.UUID):
    caller, mailbox = _caller_mailbox(request, mailbox_id, live=True)
    lifecycle.mailbox_renew(mailbox=mailbox, plan=caller.plan, ttl_ms=None)
    return HttpResponseRedirect(reverse("inbox-mailbox", args=[mailbox_id]))


@require_POST
@page
def sandbox_password(request, mailbox_id: uuid.UUID):
    """A new SMTP password for the sandbox (the old one fails at once), shown once on its page."""
    _, mailbox = _caller_mailbox(request, mailbox_id, live=True)
    password = lifecycle.sandbox_password_rotate(mailbox=mailbox)
    response = HttpResponseRedirect(reverse("inbox-mailbox", args=[mailbox_id]) + "#smtp")
    session.show_password_once(request, response, mailbox_id, password)
    return response


@require_POST
@page
def sandbox_faults(request, mailbox_id: uuid.UUID):
    """The fault editor: `add` a rule (checked by mailboxes.faults; refused, the page again
    with the form as sent and why), `remove` one by its id, or `clear` them all."""
    caller, mailbox = _caller_mailbox(request, mailbox_id, live=True)
    if not mailbox.sandbox:
        raise NotFound("No such sandbox.")
    action = request.POST.get("action")
    if action == "add":
        try:
            faults.fault_rule_add(mailbox=mailbox, rule=sandbox.rule_from_form(request.POST))
        except InvalidRequest as refused:
            return _mailbox_page(request, caller, mailbox, rule_form=request.POST.dict(), rule_problem=refused)
    elif action == "remove":
        faults.fault_rule_remove(mailbox=mailbox, rule_id=whole_number(request.POST.get("rule", ""), field="rule",
                                                                       default=0))
    elif action == "clear":
        faults.faults_clear(mailbox=mailbox)
    else:
        raise InvalidRequest("action must be add, remove or clear.", field="action")
    return HttpResponseRedirect(reverse("inbox-mailbox", args=[mailbox_id]) + "#faults")


@require_http_methods(["GET", "POST"])
@page
def mailbox_remove(request, mailbox_id: uuid.UUID):
    caller, mailbox = _caller_mailbox(request, mailbox_id)
    if request.method == "POST":
        lifecycle.mailbox_delete(mailbox=mailbox)
        return HttpResponseRedirect(reverse("inbox-mailboxes" if caller.owner else "home"))
    return render(request, "inbox/delete.html", {"mailbox": mailbox})


# --- a message ------------------------------------------------------------------------------
def _message(request, mailbox_id, message_id):
    caller, mailbox = _caller_mailbox(request, mailbox_id)
    return caller, mailbox, reading.message_get(mailbox=mailbox, message_id=message_id)


@require_GET
@page
def message_page(request, mailbox_id: uuid.UUID, message_id: int):
    caller, mailbox, message = _message(request, mailbox_id, message_id)
    message_mark_read(message=message)
    tab = request.GET.get("tab") if request.GET.get("tab") in TABS else ("html" if message.content.html else "text")
    lineage = lineage_of(message.content.headers)
    verdict = message.content.authentication or {}
    spf, dmarc, dkim = verdict.get("spf") or {}, verdict.get("dmarc") or {}, verdict.get("dkim") or []
    checks = [("SPF", spf.get("result", "none"), spf.get("domain", "")),
              ("DKIM", dkim[0].get("result", "none") if dkim else "none", ", ".join(
                  f"{item.get('domain', '')}: {item.get('result', '')}" for item in dkim)),
              ("DMARC", dmarc.get("result", "none"), dmarc.get("domain", ""))]
    badge, passed = sender_badge(direction=message.direction, authenticated=message.authenticated)
    newer, older = _neighbours(mailbox, message)
    context = {
        "mailbox": mailbox, "message": message, "content": message.content, "tab": tab, "tabs": TABS,
        "checks": checks, "badge": badge, "passed": passed, "verdict": verdict.get("verdict", "none"),
        "newer": newer, "older": older, "remote": request.GET.get("remote") == "1",
        "may_send": caller.owner is not None and mailbox.status == MailboxStatus.ACTIVE,
        "lineage": lineage, "signed_in": caller.owner, "sent": request.GET.get("sent"),
        # Named by the API's rule: no override or zero-width mark disguises a file's name.
        "attachments": [{"number": number, **meta, "filename": without_format_characters(meta.get("filename"))}
                        for number, meta in enumerate(message.content.attachments, 1)],
        "delivery": _delivery(message),
        # A sandbox's catch: every RCPT TO, a Bcc told apart (no header names it).
        "envelope": sandbox.envelope_recipients(message.rcpt_to, message.to_header, message.cc_header)
        if message.rcpt_to else [],
    }
    if tab == "html" and message.content.html:
        context["frame_hint"] = frame_hint(message.content.html)
    if tab == "raw":
        context["raw"] = bytes(message.content.raw).decode("utf-8", "replace")
    if tab == "thread" and message.thread_id:
        context["thread"] = thread_messages([message.thread])[message.thread_id]
    if tab == "checks":
        context.update(_checks(mailbox, message, now={section for section in FETCHED_AFTER
                                                      if request.GET.get(section) == "1"}))
    return render(request, "inbox/message.html", context)


def _delivery(message) -> list[dict]:
    """Each recipient's state of a message the mailbox sent (docs/delivery.md); none for mail received."""
    if message.direction != "out":
        return []
    try:
        return delivery_of(message.outbox_mail)
    except OutboxMail.DoesNotExist:
        return []


def _neighbours(mailbox, message) -> tuple[int | None, int | None]:
    """The ids of the messages just newer and just older than `message` in its mailbox's
    list (newest first), for the page's links and the keys that follow them."""
    listed = reading.message_list(mailbox=mailbox).values_list("id", flat=True)
    at = (message.received_at, message.id)
    newer = listed.filter(Q(received_at__gt=at[0]) | Q(received_at=at[0], id__gt=at[1])).reverse().first()
    older = listed.filter(Q(received_at__lt=at[0]) | Q(received_at=at[0], id__lt=at[1])).first()
    return newer, older


def _header_check_label(name: str) -> str:
    """What a person reads for a header check the API names `name`."""
    return {"list_unsubscribe": _("List-Unsubscribe header"),
            "one_click_unsubscribe": _("One-click unsubscribe (RFC 8058)"),
            "message_id": _("Message-ID header"), "date": _("Date header"),
            "dkim_aligned": _("DKIM signature aligned with From")}.get(name, name)


def _checks(mailbox, message, *, now: set) -> dict:
    """The Checks tab: the header checks and the latest link check if any; the sections in
    `now` (FETCHED_AFTER) too, which the page otherwise asks for once shown, so that neither
    a slow spamd nor a large HTML part holds the page."""
    found = {"header_checks": [{**check, "label": _header_check_label(check["name"])} for check in
                               message_checks.headers_check(mailbox=mailbox, message_id=message.id)["checks"]],
             **_link_check(mailbox, message)}
    if now:
        raw = reading.message_raw(mailbox=mailbox, message_id=message.id)  # read once, for both
        found |= (_render(raw, message) if "render" in now else {}) | (_spam(mailbox, raw) if "spam" in now else {})
    return found


def _render(raw, message) -> dict:
    """Does it render: caniemail's check of the HTML part, as the tab shows it."""
    html = message_checks.html_of(raw, content_id=message.content_id)
    found = {"html_check": html}
    names = {client["id"]: client["name"] for client in html["clients"]}
    family_names = html_support.data()["family_names"]
    # A family's score is shown when at least half the message's uses were tested there;
    # the rest are named as scored on too little data.
    scored = [(family_names.get(family, family), score, (html["tested"] or {}).get(family) or 0)
              for family, score in (html["score"] or {}).items() if family != "overall"]
    found["families"] = sorted((name, score) for name, score, tested in scored if tested >= ENOUGH_TESTED)
    found["untested_families"] = sorted((name, tested) for name, _score, tested in scored if tested < ENOUGH_TESTED)
    found["features"] = [{**feature, "lacking": sorted(names.get(client, client) for client, support in
                                                       feature["support"].items() if support != "yes")}
                         for feature in html["features"]]
    return found


def _spam(mailbox, raw: bytes) -> dict:
    try:
        return {"spam": message_checks.spam_check(mailbox=mailbox, raw=raw)}
    except RelayError as exc:
        return {"spam_error": domain_error(exc)[1]}


def _link_check(mailbox, message) -> dict:
    try:
        return {"link_check": message_checks.links_result(mailbox=mailbox, message_id=message.id)}
    except NotFound:
        return {"link_check": None}


@require_GET
@page
def message_check_section(request, mailbox_id: uuid.UUID, message_id: int, section: str):
    """One section of the Checks tab, as the page's script fetches it: the HTML check and
    spamd's answer once the page is shown, the link check while it runs."""
    if section not in CHECK_SECTIONS:
        raise Http404()
    _, mailbox, message = _message(request, mailbox_id, message_id)
    if section == "links":
        found = _link_check(mailbox, message)
    elif section == "render":
        found = _render(lambda: reading.message_raw(mailbox=mailbox, message_id=message.id), message)
    else:
        found = _spam(mailbox, reading.message_raw(mailbox=mailbox, message_id=message.id))
    return render(request, f"inbox/check_{section}.html", {"mailbox": mailbox, "message": message, **found})


@require_POST
@page
def message_check_links(request, mailbox_id: uuid.UUID, message_id: int):
    """Start a link check, then back to the Checks tab, which shows it as it goes."""
    _, mailbox, message = _message(request, mailbox_id, message_id)
    message_checks.links_start(mailbox=mailbox, message_id=message.id)
    return HttpResponseRedirect(reverse("inbox-message", args=[mailbox_id, message_id]) + "?tab=checks")


def _html_response(request, message, parts_route: str, parts_args: list) -> HttpResponse:
    parts_url = _base_url(request) + reverse(parts_route, args=[*parts_args, "x"])[:-1]
    remote = request.GET.get("remote") == "1"
    with translation.override(translation.get_language_from_request(request)):
        held_title = _("A remote image, held until you load remote images")
    response = HttpResponse(shown_html_of(content_id=message.content_id, html=message.content.html,
                                          parts_url=parts_url, remote_images=remote, held_title=held_title),
                            content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = policy(parts_url, remote_images=remote)
    response["Referrer-Policy"] = "no-referrer"
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _part_response(message, content_id: str) -> HttpResponse:
    number = next((number for number, meta in enumerate(message.content.attachments, 1)
                   if (meta.get("content_id") or "").strip("<> ") == content_id), None)
    found = attachment_of(bytes(message.content.raw), number) if number else None
    if found is None:
        raise Http404()
    meta, payload = found
    response = HttpResponse(payload, content_type=served_content_type(meta["content_type"], meta.get("charset")))
    for header, value in SAFETY_HEADERS.items():
        response[header] = value
    return response


def _readable(request, mailbox_id, message_id):
    try:
        return _message(request, mailbox_id, message_id)[2]
    except RelayError:
        raise Http404() from None


@require_GET
@xframe_options_sameorigin
def message_html(request, mailbox_id: uuid.UUID, message_id: int):
    """The mail's HTML for the message page's sandboxed frame, under its own policy."""
    message = _readable(request, mailbox_id, message_id)
    return _html_response(request, message, "inbox-message-part", [mailbox_id, message_id])


@require_GET
def message_part(request, mailbox_id: uuid.UUID, message_id: int, content_id: str):
    """An inline part of the message by its Content-ID (a `cid:` image of its HTML)."""
    return _part_response(_readable(request, mailbox_id, message_id), content_id)


def _staff_message(request, message_id: int):
    if not (request.user.is_active and request.user.is_staff):
        raise Http404()
    message = reading.message_by_id(message_id)
    if message is None:
        raise Http404()
    return message


@require_GET
@xframe_options_sameorigin
def staff_message_html(request, message_id: int):
    """The same view of a mail's HTML for the operator's admin page of the message."""
    return _html_response(request, _staff_message(request, message_id), "inbox-staff-part", [message_id])


@require_GET
def staff_message_part(request, message_id: int, content_id: str):
    return _part_response(_staff_message(request, message_id), content_id)


@require_GET
def message_download(request, mailbox_id: uuid.UUID, message_id: int, number: int = 0):
    """The message as a .eml file (`number` 0), or one of its attachments: downloads only."""
    try:
        _, _, message = _message(request, mailbox_id, message_id)
    except RelayError:
        raise Http404() from None
    if number == 0:
        response = HttpResponse(bytes(message.content.raw), content_type="message/rfc822")
        filename = f"message-{message.id}.eml"
    else:
        found = attachment_of(bytes(message.content.raw), number)
        if found is None:
            raise Http404()
        meta, payload = found
        response = HttpResponse(payload, content_type=served_content_type(meta["content_type"], meta.get("charset")))
        filename = safe_filename(meta["filename"], number)
    response["Content-Disposition"] = content_disposition_header(True, filename)
    for header, value in SAFETY_HEADERS.items():
        response[header] = value
    return response


@require_POST
@page
def message_send(request, mailbox_id: uuid.UUID, message_id: int, how: str):
    """Reply or forward, where this caller may send (an account's mailbox)."""
    caller, mailbox, message = _message(request, mailbox_id, message_id)
    if caller.owner is None:
        raise NotFound("No such mailbox.")
    text = request.POST.get("text", "")
    if how == "reply":
        reply_queue(mailbox=mailbox, message_id=message.id, reply_all=request.POST.get("reply_all") == "1",
                    **sending_checked({"text": text}))
    else:
        to = [address.strip() for address in request.POST.get("to", "").split(",") if address.strip()]
        forward_queue(mailbox=mailbox, message_id=message.id, **sending_checked({"to": to, "text": text}))
    return HttpResponseRedirect(reverse("inbox-message", args=[mailbox_id, message_id]) + f"?sent={how}")



# --- OAuth: the consent page and the connected apps -------------------------------------------
def consent_refused(request, error: str, description: str, status: int = 400) -> HttpResponse:
    """An authorization request that cannot be sent back to its client (no such client, a
    redirect URI it did not register, no PKCE S256): a page for a person's browser, RFC
    6749's JSON (`error`, `error_description`) for a program, which does not ask for HTML."""
    if request.get_preferred_type(["application/json", "text/html"]) == "text/html":
        return render(request, "inbox/problem.html", {"status": status, "message": f"{error}: {description}"},
                      status=status)
    return JsonResponse({"error": error, "error_description": description}, status=status)


class Consent(AuthorizationView):
    """The authorization endpoint's page (RFC 6749 §4.1, with the toolkit's checks of the
    client, its exact redirect URI and PKCE): the signed-in person sees the client's name,
    where it sends them back and the scopes asked, and allows or denies. An error the
    toolkit may send back to the client's redirect URI goes there (§4.1.2.1); any other is
    consent_refused's."""

    template_name = "inbox/consent.html"

    def dispatch(self, request, *args, **kwargs):
        language = translation.get_language_from_request(request)
        with translation.override(language):
            request.LANGUAGE_CODE = language
            if session.account_caller(request) is None:  # suspended or revoked since: sign in again
                next_page = urlencode({"next": request.get_full_path()})
                return HttpResponseRedirect(f"{reverse('inbox-sign-in')}?{next_page}")
            if request.method == "GET" and request.GET.get("code_challenge_method") != "S256":
                # PKCE with S256 only (the toolkit would refuse plain only after the consent).
                return self.with_policy(consent_refused(
                    request, "invalid_request", "PKCE with code_challenge_method=S256 is required."))
            response = super().dispatch(request, *args, **kwargs)
            if hasattr(response, "render"):
                response.render()
        return self.with_policy(response)

    def with_policy(self, response: HttpResponse) -> HttpResponse:
        """The pages' policy, its form-action widened to the origins the client registered
        (the form's answer redirects there, and a browser applies form-action to that
        redirect), and only once the toolkit found the client: never from the request."""
        application = getattr(self, "oauth2_data", {}).get("application")
        back = consent_form_action(application.redirect_uris) if application is not None else ""
        response.setdefault("Content-Security-Policy", PAGE_POLICY.replace(
            "form-action 'self'", f"form-action 'self' {back}" if back else "form-action 'self'"))
        return response

    def error_response(self, error, application, **kwargs):
        if isinstance(error, FatalClientError):
            oauthlib_error = error.oauthlib_error
            return consent_refused(self.request, oauthlib_error.error, oauthlib_error.description,
                                   oauthlib_error.status_code)
        return super().error_response(error, application, **kwargs)

    def handle_prompt_create(self):
        # Whoever reaches this is signed in (dispatch sent everyone else to sign in first):
        # "create" asks nothing more of them, as the toolkit treats a signed-in session.
        return None

    def form_valid(self, form):
        # The toolkit looks the posted client up without asking whether it exists.
        if not get_application_model().objects.filter(client_id=form.cleaned_data["client_id"]).exists():
            return consent_refused(self.request, "invalid_request", "Invalid client_id parameter value.")
        return super().form_valid(form)

    def form_invalid(self, form):
        return consent_refused(self.request, "invalid_request", "The consent form was incomplete.")

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["signed_in"] = session.account_caller(self.request).owner
        return context


@require_http_methods(["GET", "POST"])
@page
def connected_apps(request):
    """The agents this account let in (each that can still act: its scopes, since when) and
    its API keys; revoking either stops it working on the next request (this session too,
    if it came from that key)."""
    caller = session.account_caller(request)
    if caller is None:
        return HttpResponseRedirect(reverse("inbox-sign-in"))
    if request.method == "POST" and request.POST.get("key"):
        api_key_revoke(account=caller.owner, key_id=whole_number(request.POST["key"], field="key"))
        return HttpResponseRedirect(reverse("inbox-apps"))
    if request.method == "POST":
        application_id = whole_number(request.POST.get("application", ""), field="application")
        if application_id is None:
            raise NotFound("No such app.")
        oauth_app_revoke(account=caller.owner, application_id=application_id)
        return HttpResponseRedirect(reverse("inbox-apps"))
    keys = caller.owner.api_keys.filter(revoked_at=None).order_by("-created_at")
    return render(request, "inbox/apps.html", {"signed_in": caller.owner, "apps": oauth_apps_of(caller.owner),
                                               "keys": keys, "this_key": caller.api_key_id})
