"""The webhook routes of docs/api.md: subscribe, list, unsubscribe, and see deliveries."""
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.authentication import IsAccount
from api.schema import PAGE_PARAMETERS, paginated
from api.webhook_serializers import (
    WebhookCreateSerializer,
    WebhookCreatedSerializer,
    WebhookDeliverySerializer,
    WebhookSerializer,
)
from api.fields import validated
from api.pagination import page_response
from webhooks.models import Webhook
from webhooks.services import webhook_create, webhook_delete, webhook_get


class WebhookCollectionView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="webhooks_list", summary="Your webhooks", parameters=PAGE_PARAMETERS,
                   responses=paginated(WebhookSerializer))
    def get(self, request):
        webhooks = Webhook.objects.filter(owner=request.user.owner).order_by("-created_at", "-id")
        return page_response(request, self, webhooks, WebhookSerializer)

    @extend_schema(operation_id="webhooks_create",
                   summary="Subscribe a URL to events; returns the signing secret once",
                   request=WebhookCreateSerializer, responses={201: WebhookCreatedSerializer})
    def post(self, request):
        body = validated(WebhookCreateSerializer, request.data)
        webhook = webhook_create(owner=request.user.owner, url=body["url"], events=body["events"],
                                 mailbox_id=body.get("mailbox_id"))
        return Response({**WebhookSerializer(webhook).data, "secret": webhook.secret}, status=status.HTTP_201_CREATED)


class WebhookDetailView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="webhooks_delete", summary="Unsubscribe: no more deliveries",
                   responses={204: OpenApiResponse(description="Deleted.")})
    def delete(self, request, webhook_id):
        webhook_delete(owner=request.user.owner, webhook_id=webhook_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookDeliveriesView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="webhooks_deliveries", summary="A webhook's deliveries, newest first",
                   parameters=PAGE_PARAMETERS, responses=paginated(WebhookDeliverySerializer))
    def get(self, request, webhook_id):
        webhook = webhook_get(owner=request.user.owner, webhook_id=webhook_id)
        return page_response(request, self, webhook.deliveries.order_by("-created_at", "-id"), WebhookDeliverySerializer)
