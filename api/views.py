"""The REST API of docs/api.md for mailboxes, their messages, sending (replies and forwards
included) and conversations. Views validate input, call one service or selector, render
the result; the domain's exceptions become responses in api.errors."""
from django.http import HttpResponse
from django.utils.http import content_disposition_header
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import permissions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.authentication import AnonymousCreateThrottle, AnyoneWithinScope, caller_of
from api.conversation_serializers import (
    ForwardSerializer,
    OutboundSerializer,
    ReleaseSerializer,
    ReplySerializer,
    SendAcceptedSerializer,
    SendSerializer,
    ThreadDetailSerializer,
    ThreadSerializer,
)
from api.fields import validated
from api.pagination import RelayPagination, page_response
from api.schema import PAGE_PARAMETERS, WAIT_PARAMETERS, paginated
from api.serializers import (
    MailboxCreateSerializer,
    MailboxCreatedSerializer,
    MailboxListQuerySerializer,
    MailboxPatchSerializer,
    MailboxRenewSerializer,
    MailboxSerializer,
    MessageDetailSerializer,
    MessageSearchQuerySerializer,
    MessageSummarySerializer,
    FaultRuleShownSerializer,
    FaultRulesSerializer,
    FaultRulesShownSerializer,
    SandboxPasswordSerializer,
)
from mailboxes.errors import InvalidRequest, NotFound
from mailboxes.faults import faults_clear, faults_get, faults_set
from mailboxes.lifecycle import (LABEL_FIELDS, mailbox_create, mailbox_delete, mailbox_label, mailbox_renew,
                                 sandbox_password_rotate, smtp_settings)
from mailboxes.messages import message_delete, message_mark_read
from mailboxes.threads import thread_get, thread_list, thread_messages, thread_participants
from relay.inbound.attachments import SAFETY_HEADERS, attachment_of, safe_filename, served_content_type
from relay.models import OutboxMail
from relay.outbox.outbound import (forward_queue, outbound_get, outbound_list, outbound_queue, release_queue,
                                   reply_queue)
from relay import reading
from relay.backends import get_backend


def queued(mail: OutboxMail) -> Response:
    """202 for a send, a reply, a forward or a release: its outbox entry, where to follow it, and
    the copy kept in the mailbox."""
    location = reverse("outbound-detail", kwargs={"mailbox_id": mail.mailbox_id, "outbound_id": mail.id})
    return Response({"id": mail.id, "status": mail.status, "message_id": mail.kept_as_id},
                    status=status.HTTP_202_ACCEPTED, headers={"Location": location})


class IndexView(APIView):
    """GET /api/v1/: where everything is. Open to anyone, like the docs."""

    permission_classes = [permissions.AllowAny]

    @extend_schema(operation_id="index", summary="Links to the routes, the docs and the schema",
                   responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        # The root once, then plain paths: build_absolute_uri would percent-encode the
        # templates' braces, and a template is for a client to fill in, not to follow.
        root = request.build_absolute_uri("/").rstrip("/")

        def link(path: str) -> str:
            return root + path

        return Response({
            "name": "Relay",
            "docs": link(reverse("docs")),
            "schema": link(reverse("schema")),
            "mcp": link("/mcp"),
            "routes": {
                "mailboxes": link(reverse("mailbox-list")),
                "search": link(reverse("message-search")),
                "mailbox": link("/api/v1/mailboxes/{mailbox_id}"),
                "renew": link("/api/v1/mailboxes/{mailbox_id}/renew"),
                "messages": link("/api/v1/mailboxes/{mailbox_id}/messages"),
                "message": link("/api/v1/mailboxes/{mailbox_id}/messages/{message_id}"),
                "raw": link("/api/v1/mailboxes/{mailbox_id}/messages/{message_id}/raw"),
                "events": link("/api/v1/mailboxes/{mailbox_id}/events"),
                "outbox": link("/api/v1/mailboxes/{mailbox_id}/outbox"),
                "whoami": link(reverse("whoami")),
                "sign_up": link(reverse("account-signup")),
                "activate": link(reverse("account-activate")),
                "recover": link(reverse("account-recover")),
                "recover_confirm": link(reverse("account-recover-confirm")),
                "account": link(reverse("account")),
                "keys": link(reverse("key-list")),
                "domains": link(reverse("domain-list")),
                "domain_verify": link("/api/v1/domains/{domain_id}/verify"),
            },
            "authentication": "Authorization: Bearer <API key or mailbox token>",
            "agents": "MCP tools over streamable HTTP at `mcp` (POST, the same credentials); over stdio: "
                      "RELAY_API_KEY=<key> python manage.py runmcp",
        })


class WhoAmIView(APIView):
    """Who the credentials belong to: a check that a key works, and the benchmarks'
    trivial authenticated endpoint (bench/api.py)."""

    @extend_schema(operation_id="whoami", summary="Who the credentials belong to", responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        caller = request.user
        if not caller.is_anonymous:
            return Response({"owner": caller.owner.login, "plan": caller.plan})
        return Response({"mailbox": str(caller.mailbox_id), "plan": caller.plan})


class MailboxCollectionView(APIView):
    def get_permissions(self):
        # Anyone may create (anonymously, throttled); only a caller with a key may list.
        if self.request.method == "POST":
            return [permissions.AllowAny(), AnyoneWithinScope()]  # AllowAny: the schema says so
        return super().get_permissions()

    def get_throttles(self):
        if self.request.method == "POST":
            return [AnonymousCreateThrottle()]
        return []

    @extend_schema(
        operation_id="mailboxes_list", summary="List your mailboxes, filtered; newest first unless ordered otherwise",
        parameters=[MailboxListQuerySerializer, *PAGE_PARAMETERS],
        responses=paginated(MailboxSerializer),
    )
    def get(self, request):
        query = validated(MailboxListQuerySerializer, request.query_params)
        mailboxes = reading.mailbox_list(
            caller=request.user, include_expired=query["include_expired"], status=query.get("status"),
            tags=query.get("tag", []), text=query.get("q", ""), created_after=query.get("created_after"),
            created_before=query.get("created_before"), ordering=query["ordering"])
        return page_response(request, self, mailboxes, MailboxSerializer)

    @extend_schema(operation_id="mailboxes_create", summary="Create a mailbox (anonymously: free plan, returns a token)",
                   request=MailboxCreateSerializer, responses={201: MailboxCreatedSerializer})
    def post(self, request):
        body = validated(MailboxCreateSerializer, request.data)
        caller = caller_of(request)
        # A mailbox token does not make its holder an owner: it creates anonymously.
        mailbox, token = mailbox_create(backend=get_backend(),
                                        caller=caller if caller and not caller.is_anonymous else None,
                                        local_part=body.get("local_part"), domain=body.get("domain"),
                                        ttl_ms=body.get("ttl_ms"), sandbox=body["sandbox"],
                                        labels={field: body[field] for field in LABEL_FIELDS if field in body})
        data = MailboxSerializer.represent(mailbox)
        if token:
            data["token"] = token
        if mailbox.sandbox:
            data["smtp"] = smtp_settings(mailbox=mailbox, password=mailbox.smtp_password)
        return Response(data, status=status.HTTP_201_CREATED)


class MailboxDetailView(APIView):
    @extend_schema(operation_id="mailboxes_get", summary="Get a mailbox (expired on the spot if past expires_at)", responses=MailboxSerializer)
    def get(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, live=False)
        return Response(MailboxSerializer.represent(mailbox))

    @extend_schema(operation_id="mailboxes_update", summary="Set the name, tags or metadata (each given field replaced)",
                   request=MailboxPatchSerializer, responses=MailboxSerializer)
    def patch(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        labels = validated(MailboxPatchSerializer, request.data)
        return Response(MailboxSerializer.represent(mailbox_label(mailbox=mailbox, labels=labels)))

    @extend_schema(operation_id="mailboxes_delete", summary="Delete a mailbox: it stops receiving and is deprovisioned", responses={204: None})
    def delete(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, live=False)
        mailbox_delete(mailbox=mailbox)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MailboxRenewView(APIView):
    @extend_schema(operation_id="mailboxes_renew", summary="Renew: expires_at = now + ttl_ms", request=MailboxRenewSerializer,
                   responses=MailboxSerializer)
    def post(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        body = validated(MailboxRenewSerializer, request.data)
        mailbox = mailbox_renew(mailbox=mailbox, plan=request.user.plan, ttl_ms=body.get("ttl_ms"))
        return Response(MailboxSerializer.represent(mailbox))


class SandboxPasswordView(APIView):
    @extend_schema(operation_id="sandbox_smtp_password", summary="A new SMTP password for a sandbox (the old one "
                   "fails at once)", request=None, responses=SandboxPasswordSerializer)
    def post(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        password = sandbox_password_rotate(mailbox=mailbox)
        return Response({**MailboxSerializer.represent(mailbox),
                         "smtp": smtp_settings(mailbox=mailbox, password=password)})


def _rules_shown(rules) -> Response:
    return Response({"rules": [FaultRuleShownSerializer.of(rule) for rule in rules]})


class SandboxFaultsView(APIView):
    """A sandbox's fault rules (docs/sandbox.md, "Faults"); each rule is checked by the service."""

    @extend_schema(operation_id="sandbox_faults_set", summary="Replace a sandbox's fault rules",
                   request=FaultRulesSerializer, responses=FaultRulesShownSerializer)
    def put(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        if not isinstance(request.data, dict) or set(request.data) != {"rules"}:
            raise InvalidRequest('The body must be {"rules": [...]}.', field="rules")
        return _rules_shown(faults_set(mailbox=mailbox, rules=request.data["rules"]))

    @extend_schema(operation_id="sandbox_faults_get", summary="A sandbox's fault rules, with what is left of each",
                   responses=FaultRulesShownSerializer)
    def get(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, live=False)
        return _rules_shown(faults_get(mailbox=mailbox))

    @extend_schema(operation_id="sandbox_faults_clear", summary="Remove a sandbox's fault rules", responses={204: None})
    def delete(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, live=False)
        faults_clear(mailbox=mailbox)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MailboxRowsView(APIView):
    """GET: one of the caller's mailboxes' rows (received or sent mail), paginated.
    `live_only`: the rows are readable only while the mailbox is active (410 after)."""

    serializer_class: type
    live_only = False

    def rows(self, mailbox):
        raise NotImplementedError

    def get(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, live=self.live_only)
        return page_response(request, self, self.rows(mailbox), self.serializer_class)


def _search_answer(request, view, mailbox=None) -> Response:
    search = MessageSearchQuerySerializer.filters(validated(MessageSearchQuerySerializer, request.query_params))
    with reading.messages_read(caller=request.user, mailbox=mailbox, search=search, pages=True) as rows:
        return page_response(request, view, rows, MessageSummarySerializer, count_with_page=bool(search["words"]))


class MessageSearchView(APIView):
    @extend_schema(operation_id="messages_search",
                   summary="Search the messages of all your mailboxes (expired ones too, while kept), newest first",
                   parameters=[MessageSearchQuerySerializer, *PAGE_PARAMETERS],
                   responses=paginated(MessageSummarySerializer))
    def get(self, request):
        reading.mailboxes_freshen(request.user)
        return _search_answer(request, self)


@extend_schema_view(get=extend_schema(
    operation_id="messages_list",
    summary="List messages (received and sent), filtered, newest first; with `wait`, hold the request until one "
            "arrives",
    parameters=[MessageSearchQuerySerializer, *PAGE_PARAMETERS, *WAIT_PARAMETERS],
    responses=paginated(MessageSummarySerializer)))
class MessageCollectionView(APIView):

    def get(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, fresh=True)
        return _search_answer(request, self, mailbox)

    @extend_schema(operation_id="messages_send", summary="Send a message from this mailbox (needs an API key)",
                   request=SendSerializer, responses={202: SendAcceptedSerializer})
    def post(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        # Where to follow the send: its outbox entry (the id is not a received message's).
        return queued(outbound_queue(mailbox=mailbox, **validated(SendSerializer, request.data)))


class MessageDetailView(APIView):
    @extend_schema(operation_id="messages_get", summary="Get a message with its bodies and headers; marks it read",
                   responses=MessageDetailSerializer)
    def get(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        message = reading.message_get(mailbox=mailbox, message_id=message_id)
        message_mark_read(message=message)
        base_url = request.build_absolute_uri("/").rstrip("/")
        return Response(MessageDetailSerializer(message, context={"base_url": base_url}).data)

    @extend_schema(operation_id="messages_delete", summary="Delete a message", responses={204: None})
    def delete(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        if not message_delete(mailbox=mailbox, message_id=message_id):
            raise NotFound()
        return Response(status=status.HTTP_204_NO_CONTENT)


class MessageRawView(APIView):
    @extend_schema(operation_id="messages_raw", summary="The exact bytes received", responses={(200, "message/rfc822"): OpenApiTypes.BINARY})
    def get(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        raw = reading.message_raw(mailbox=mailbox, message_id=message_id)
        return HttpResponse(raw, content_type="message/rfc822")


class AttachmentView(APIView):
    @extend_schema(operation_id="attachments_get", summary="Download an attachment (always as a download, sandboxed)",
                   responses={(200, "*/*"): OpenApiTypes.BINARY})
    def get(self, request, mailbox_id, message_id, attachment_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        found = attachment_of(reading.message_raw(mailbox=mailbox, message_id=message_id), attachment_id)
        if found is None:
            raise NotFound("No such attachment.")
        meta, payload = found
        response = HttpResponse(payload, content_type=served_content_type(meta["content_type"], meta.get("charset")))
        response["Content-Disposition"] = content_disposition_header(
            True, safe_filename(meta["filename"], attachment_id))
        for header, value in SAFETY_HEADERS.items():
            response[header] = value
        return response


@extend_schema_view(get=extend_schema(operation_id="outbox_list", summary="List sent messages and their status",
                                      parameters=PAGE_PARAMETERS, responses=paginated(OutboundSerializer)))
class OutboundCollectionView(MailboxRowsView):
    serializer_class = OutboundSerializer

    def rows(self, mailbox):
        return outbound_list(mailbox=mailbox)


class OutboundDetailView(APIView):
    @extend_schema(operation_id="outbox_get", summary="A sent message's status, attempts and last error", responses=OutboundSerializer)
    def get(self, request, mailbox_id, outbound_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, live=False)
        return Response(OutboundSerializer(outbound_get(mailbox=mailbox, outbound_id=outbound_id)).data)


# --- replies, forwards and threads (docs/api.md, "Conversations") --------------------------------
class ReplyView(APIView):
    @extend_schema(operation_id="messages_reply", summary="Reply to a message (needs an API key)",
                   request=ReplySerializer, responses={202: SendAcceptedSerializer})
    def post(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        return queued(reply_queue(mailbox=mailbox, message_id=message_id, **validated(ReplySerializer, request.data)))


class ForwardView(APIView):
    @extend_schema(operation_id="messages_forward", summary="Forward a message, attached whole (needs an API key)",
                   request=ForwardSerializer, responses={202: SendAcceptedSerializer})
    def post(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        return queued(forward_queue(mailbox=mailbox, message_id=message_id, **validated(ForwardSerializer, request.data)))


class ReleaseView(APIView):
    @extend_schema(operation_id="messages_release",
                   summary="Send a caught message on, as it was caught, to the addresses named and no others, behind "
                           "a Resent-* block (needs an API key; 409 for a copy of mail the mailbox sent)",
                   request=ReleaseSerializer, responses={202: SendAcceptedSerializer})
    def post(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        return queued(release_queue(mailbox=mailbox, message_id=message_id, **validated(ReleaseSerializer, request.data)))


class ThreadCollectionView(APIView):
    @extend_schema(operation_id="threads_list", summary="List the conversations, newest activity first",
                   parameters=PAGE_PARAMETERS, responses=paginated(ThreadSerializer))
    def get(self, request, mailbox_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, fresh=True)
        paginator = RelayPagination()
        page = paginator.paginate_queryset(thread_list(mailbox_id=mailbox.id), request, view=self)
        participants = thread_participants([thread.id for thread in page])
        return paginator.get_paginated_response(
            ThreadSerializer(page, many=True, context={"participants": participants}).data)


class ThreadDetailView(APIView):
    @extend_schema(operation_id="threads_get", summary="A conversation with its messages, oldest first",
                   responses=ThreadDetailSerializer)
    def get(self, request, mailbox_id, thread_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id, fresh=True)
        thread = thread_get(mailbox_id=mailbox.id, thread_id=thread_id)
        context = {"participants": thread_participants([thread.id]), "messages": thread_messages([thread])}
        return Response(ThreadDetailSerializer(thread, context=context).data)
