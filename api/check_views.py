"""Message checks (docs/checks.md): a message's HTML against the email clients, its links,
its spam score and its headers, each through checks.message_checks."""
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.check_serializers import HeaderCheckSerializer, HtmlCheckSerializer, LinkCheckSerializer, SpamCheckSerializer
from checks import message_checks
from relay import reading


class HtmlCheckView(APIView):
    @extend_schema(operation_id="checks_html", summary="Which HTML and CSS features of the message the email "
                   "clients support (caniemail's data)", responses=HtmlCheckSerializer)
    def get(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        return Response(message_checks.html_check(mailbox=mailbox, message_id=message_id))


class LinkCheckView(APIView):
    @extend_schema(operation_id="checks_links_start", summary="Start checking the message's links (at most 50)",
                   request=None, responses={202: LinkCheckSerializer})
    def post(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        return Response(message_checks.links_start(mailbox=mailbox, message_id=message_id),
                        status=status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="checks_links", summary="The latest link check: pending, or done with each "
                   "link's answer", responses=LinkCheckSerializer)
    def get(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        return Response(message_checks.links_result(mailbox=mailbox, message_id=message_id))


class SpamCheckView(APIView):
    @extend_schema(operation_id="checks_spam", summary="The message's SpamAssassin score (404 not_configured "
                   "without RELAY_SPAMD_URL)", responses=SpamCheckSerializer)
    def get(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        raw = reading.message_raw(mailbox=mailbox, message_id=message_id)
        return Response(message_checks.spam_check(mailbox=mailbox, raw=raw))


class HeaderCheckView(APIView):
    @extend_schema(operation_id="checks_headers", summary="What bulk-mail receivers require of the message's "
                   "headers", responses=HeaderCheckSerializer)
    def get(self, request, mailbox_id, message_id):
        mailbox = reading.mailbox_open(caller=request.user, mailbox_id=mailbox_id)
        return Response(message_checks.headers_check(mailbox=mailbox, message_id=message_id))
