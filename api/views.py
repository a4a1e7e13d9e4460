"""The REST API of SPEC §5. Views validate input, call one service or selector, render
the result; the domain's exceptions become responses in api.errors."""
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.authentication import AnonymousCreateThrottle, caller_of
from api.pagination import RelayPagination
from api.serializers import (
    MailboxCreatedSerializer,
    MailboxCreateSerializer,
    MailboxListQuerySerializer,
    MailboxRenewSerializer,
    MailboxSerializer,
    MessageDetailSerializer,
    MessageSummarySerializer,
    OutboundSerializer,
    SendAcceptedSerializer,
    SendSerializer,
)
from mailboxes import selectors, services
from mailboxes.ending import mailbox_delete
from mailboxes.errors import NotFound
from relay.outbound import outbound_queue
from relay.provisioning import mailbox_create


def _paginated(request, view, queryset, serializer_class) -> Response:
    paginator = RelayPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class WhoAmIView(APIView):
    """Who the credentials belong to: a check that a key works, and the benchmarks'
    trivial authenticated endpoint (bench/api.py)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        caller = request.user
        if not caller.is_anonymous:
            return Response({"owner": caller.owner.name, "plan": caller.plan})
        return Response({"mailbox": str(caller.mailbox_id), "plan": caller.plan})


class MailboxCollectionView(APIView):
    def get_permissions(self):
        # Anyone may create (anonymously, throttled); only a caller with a key may list.
        if self.request.method == "POST":
            return [permissions.AllowAny()]
        return super().get_permissions()

    def get_throttles(self):
        if self.request.method == "POST":
            return [AnonymousCreateThrottle()]
        return []

    @extend_schema(
        parameters=[OpenApiParameter("include_expired", OpenApiTypes.BOOL, description="Also list expired mailboxes.")],
        responses=MailboxSerializer(many=True),
    )
    def get(self, request):
        query = _valid(MailboxListQuerySerializer, request.query_params)
        mailboxes = selectors.mailbox_list(caller=request.user, include_expired=query["include_expired"])
        return _paginated(request, self, mailboxes, MailboxSerializer)

    @extend_schema(request=MailboxCreateSerializer, responses={201: MailboxCreatedSerializer})
    def post(self, request):
        body = _valid(MailboxCreateSerializer, request.data)
        caller = caller_of(request)
        # A mailbox token does not make its holder an owner: it creates anonymously.
        mailbox, token = mailbox_create(caller=caller if caller and not caller.is_anonymous else None,
                                        local_part=body.get("local_part"), domain=body.get("domain"),
                                        ttl_ms=body.get("ttl_ms"))
        data = MailboxSerializer(mailbox).data
        if token:
            data["token"] = token
        return Response(data, status=status.HTTP_201_CREATED)


class MailboxDetailView(APIView):
    @extend_schema(responses=MailboxSerializer)
    def get(self, request, mailbox_id):
        mailbox = selectors.mailbox_get(caller=request.user, mailbox_id=mailbox_id)
        return Response(MailboxSerializer(mailbox).data)

    @extend_schema(responses={204: None})
    def delete(self, request, mailbox_id):
        mailbox = selectors.mailbox_get(caller=request.user, mailbox_id=mailbox_id)
        mailbox_delete(mailbox=mailbox)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MailboxRenewView(APIView):
    @extend_schema(request=MailboxRenewSerializer, responses=MailboxSerializer)
    def post(self, request, mailbox_id):
        mailbox = selectors.mailbox_get_active(caller=request.user, mailbox_id=mailbox_id)
        body = _valid(MailboxRenewSerializer, request.data)
        mailbox = services.mailbox_renew(mailbox=mailbox, plan=request.user.plan, ttl_ms=body.get("ttl_ms"))
        return Response(MailboxSerializer(mailbox).data)


class MessageCollectionView(APIView):
    @extend_schema(responses=MessageSummarySerializer(many=True))
    def get(self, request, mailbox_id):
        mailbox = selectors.mailbox_get_active(caller=request.user, mailbox_id=mailbox_id)
        return _paginated(request, self, selectors.message_list(mailbox=mailbox), MessageSummarySerializer)

    @extend_schema(request=SendSerializer, responses={202: SendAcceptedSerializer})
    def post(self, request, mailbox_id):
        mailbox = selectors.mailbox_get_active(caller=request.user, mailbox_id=mailbox_id)
        outbound = outbound_queue(mailbox=mailbox, **_valid(SendSerializer, request.data))
        return Response({"id": outbound.id, "status": outbound.status}, status=status.HTTP_202_ACCEPTED)


class MessageDetailView(APIView):
    @extend_schema(responses=MessageDetailSerializer)
    def get(self, request, mailbox_id, message_id):
        mailbox = selectors.mailbox_get_active(caller=request.user, mailbox_id=mailbox_id)
        message = selectors.message_get(mailbox=mailbox, message_id=message_id)
        services.message_mark_read(message=message)
        return Response(MessageDetailSerializer(message).data)

    @extend_schema(responses={204: None})
    def delete(self, request, mailbox_id, message_id):
        mailbox = selectors.mailbox_get_active(caller=request.user, mailbox_id=mailbox_id)
        if not services.message_delete(mailbox=mailbox, message_id=message_id):
            raise NotFound()
        return Response(status=status.HTTP_204_NO_CONTENT)


class MessageRawView(APIView):
    @extend_schema(responses={(200, "message/rfc822"): OpenApiTypes.BINARY})
    def get(self, request, mailbox_id, message_id):
        mailbox = selectors.mailbox_get_active(caller=request.user, mailbox_id=mailbox_id)
        raw = selectors.message_raw(mailbox=mailbox, message_id=message_id)
        return HttpResponse(raw, content_type="message/rfc822")


class OutboundCollectionView(APIView):
    @extend_schema(responses=OutboundSerializer(many=True))
    def get(self, request, mailbox_id):
        mailbox = selectors.mailbox_get(caller=request.user, mailbox_id=mailbox_id)
        return _paginated(request, self, selectors.outbound_list(mailbox=mailbox), OutboundSerializer)


class OutboundDetailView(APIView):
    @extend_schema(responses=OutboundSerializer)
    def get(self, request, mailbox_id, outbound_id):
        mailbox = selectors.mailbox_get(caller=request.user, mailbox_id=mailbox_id)
        return Response(OutboundSerializer(selectors.outbound_get(mailbox=mailbox, outbound_id=outbound_id)).data)
