"""The REST API of SPEC §5. Views validate input, call one service, render the result."""
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, status
from rest_framework.exceptions import NotFound
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response
from rest_framework.views import APIView

from expiry.services import mailbox_delete
from mailboxes import selectors, services
from mailboxes.authentication import AnonymousCreateThrottle, Principal
from mailboxes.models import Message, OutboundMessage
from mailboxes.pagination import RelayPagination
from mailboxes.serializers import (
    MailboxCreatedSerializer,
    MailboxCreateSerializer,
    MailboxRenewSerializer,
    MailboxSerializer,
    MessageDetailSerializer,
    MessageSummarySerializer,
    OutboundSerializer,
    SendSerializer,
)


def _principal(request) -> Principal | None:
    return request.user if isinstance(request.user, Principal) else None


def _paginated(request, view, queryset, serializer_class) -> Response:
    paginator = RelayPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


class WhoAmIView(APIView):
    """Who the credentials belong to: a check that a key works, and the benchmarks'
    trivial authenticated endpoint (bench/api.py)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        principal = request.user
        if principal.owner is not None:
            return Response({"owner": principal.owner.name, "plan": principal.plan})
        return Response({"mailbox": str(principal.mailbox_id), "plan": principal.plan})


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
        include_expired = request.query_params.get("include_expired", "").lower() in ("1", "true", "yes")
        mailboxes = selectors.mailbox_list(principal=request.user, include_expired=include_expired)
        return _paginated(request, self, mailboxes, MailboxSerializer)

    @extend_schema(request=MailboxCreateSerializer, responses={201: MailboxCreatedSerializer})
    def post(self, request):
        principal = _principal(request)
        plan = principal.plan if principal else "free"
        serializer = MailboxCreateSerializer(data=request.data, context={"plan": plan})
        serializer.is_valid(raise_exception=True)
        # A mailbox token does not make its holder an owner: it creates anonymously.
        mailbox, token = services.mailbox_create(
            principal=principal if principal and principal.owner else None,
            local_part=serializer.validated_data.get("local_part"),
            domain=serializer.validated_data.get("domain"),
            ttl_ms=serializer.validated_data.get("ttl_ms"),
        )
        data = MailboxSerializer(mailbox).data
        if token:
            data["token"] = token
        return Response(data, status=status.HTTP_201_CREATED)


class MailboxDetailView(APIView):
    @extend_schema(responses=MailboxSerializer)
    def get(self, request, mailbox_id):
        mailbox = selectors.mailbox_get(principal=request.user, mailbox_id=mailbox_id)
        return Response(MailboxSerializer(mailbox).data)

    @extend_schema(responses={204: None})
    def delete(self, request, mailbox_id):
        mailbox = selectors.mailbox_get(principal=request.user, mailbox_id=mailbox_id)
        mailbox_delete(mailbox=mailbox)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MailboxRenewView(APIView):
    @extend_schema(request=MailboxRenewSerializer, responses=MailboxSerializer)
    def post(self, request, mailbox_id):
        mailbox = selectors.mailbox_get_active(principal=request.user, mailbox_id=mailbox_id)
        plan = request.user.plan
        serializer = MailboxRenewSerializer(data=request.data, context={"plan": plan})
        serializer.is_valid(raise_exception=True)
        ttl_ms = serializer.validated_data.get("ttl_ms")
        mailbox = services.mailbox_renew(
            mailbox=mailbox, ttl_ms=ttl_ms if ttl_ms is not None else services.plan_default_ttl_ms(plan))
        return Response(MailboxSerializer(mailbox).data)


class MessageCollectionView(APIView):
    @extend_schema(responses=MessageSummarySerializer(many=True))
    def get(self, request, mailbox_id):
        mailbox = selectors.mailbox_get_active(principal=request.user, mailbox_id=mailbox_id)
        messages = Message.objects.filter(mailbox=mailbox).defer("raw", "text", "html", "headers").order_by("-received_at", "-id")
        return _paginated(request, self, messages, MessageSummarySerializer)

    @extend_schema(request=SendSerializer, responses={202: OutboundSerializer})
    def post(self, request, mailbox_id):
        mailbox = selectors.mailbox_get_active(principal=request.user, mailbox_id=mailbox_id)
        serializer = SendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        from relay.services import outbound_queue

        outbound = outbound_queue(mailbox=mailbox, **serializer.validated_data)
        return Response({"id": outbound.id, "status": outbound.status}, status=status.HTTP_202_ACCEPTED)


class MessageDetailView(APIView):
    @extend_schema(responses=MessageDetailSerializer)
    def get(self, request, mailbox_id, message_id):
        mailbox = selectors.mailbox_get_active(principal=request.user, mailbox_id=mailbox_id)
        message = get_object_or_404(Message.objects.defer("raw"), mailbox=mailbox, id=message_id)
        services.message_mark_read(message=message)
        return Response(MessageDetailSerializer(message).data)

    @extend_schema(responses={204: None})
    def delete(self, request, mailbox_id, message_id):
        mailbox = selectors.mailbox_get_active(principal=request.user, mailbox_id=mailbox_id)
        if not services.message_delete(mailbox=mailbox, message_id=message_id):
            raise NotFound()
        return Response(status=status.HTTP_204_NO_CONTENT)


class MessageRawView(APIView):
    @extend_schema(responses={(200, "message/rfc822"): OpenApiTypes.BINARY})
    def get(self, request, mailbox_id, message_id):
        mailbox = selectors.mailbox_get_active(principal=request.user, mailbox_id=mailbox_id)
        message = get_object_or_404(Message.objects.only("raw"), mailbox=mailbox, id=message_id)
        return HttpResponse(bytes(message.raw), content_type="message/rfc822")


class OutboundCollectionView(APIView):
    @extend_schema(responses=OutboundSerializer(many=True))
    def get(self, request, mailbox_id):
        mailbox = selectors.mailbox_get(principal=request.user, mailbox_id=mailbox_id)
        return _paginated(request, self, OutboundMessage.objects.filter(mailbox=mailbox).order_by("-created_at", "-id"), OutboundSerializer)


class OutboundDetailView(APIView):
    @extend_schema(responses=OutboundSerializer)
    def get(self, request, mailbox_id, outbound_id):
        mailbox = selectors.mailbox_get(principal=request.user, mailbox_id=mailbox_id)
        return Response(OutboundSerializer(get_object_or_404(OutboundMessage, mailbox=mailbox, id=outbound_id)).data)
