"""The account routes of docs/api.md: sign-up, activation, key recovery, keys, the account.

Sign-up and recovery answer the same whatever the email: no response tells whether an
address has an account. The unauthenticated routes are limited per client address
(RELAY_SIGNUP_RATE, in the shared cache)."""
import logging

from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import permissions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import credentials, services
from accounts.models import ApiKey
from api.authentication import AccountRouteThrottle, IsAccount
from api.schema import PAGE_PARAMETERS, paginated
from api.account_serializers import (
    AcceptedSerializer,
    AccountSerializer,
    ActivateByCodeSerializer,
    ActivateByLinkSerializer,
    ActivateSerializer,
    ActivatedSerializer,
    ApiKeyCreatedSerializer,
    ApiKeySerializer,
    EmptySerializer,
    RecoverConfirmSerializer,
    RecoverSerializer,
    RecoveredSerializer,
    SignUpSerializer,
)
from api.fields import validated
from api.pagination import page_response
from relay.outbox.account_mail import account_sign_up
from relay.tasks import mail_key_recovery

logger = logging.getLogger(__name__)
ACCEPTED = {"status": "provisioned"}


class PublicAccountView(APIView):
    """No credentials; limited per client address, each route its own budget."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]
    throttle_classes = [AccountRouteThrottle]


class SignUpView(PublicAccountView):
    throttle_scope = "signup"

    @extend_schema(operation_id="accounts_create", summary="Sign up: mails an activation link and code",
                   request=SignUpSerializer, responses={202: AcceptedSerializer}, auth=[])
    def post(self, request):
        account_sign_up(**validated(SignUpSerializer, request.data))
        return Response(ACCEPTED, status=status.HTTP_202_ACCEPTED)


class ActivateView(PublicAccountView):
    throttle_scope = "activate"

    @extend_schema(operation_id="accounts_activate",
                   summary="Activate with the link's token, or with email and code; returns the first API key once",
                   request=PolymorphicProxySerializer(
                       component_name="ActivateRequest", resource_type_field_name=None,
                       serializers=[ActivateByLinkSerializer, ActivateByCodeSerializer]),
                   responses={200: ActivatedSerializer}, auth=[])
    def post(self, request):
        body = validated(ActivateSerializer, request.data)
        if "token" in body:
            account, key = services.account_activate_by_link(link_token=body["token"])
        else:
            account, key = services.account_activate_by_code(email=body["email"], code=body["code"])
        return Response({"account": AccountSerializer(account).data, "api_key": key})


class RecoverView(PublicAccountView):
    throttle_scope = "recover"

    @extend_schema(operation_id="accounts_recover", summary="Ask for a key recovery mail (always 202)",
                   request=RecoverSerializer, responses={202: AcceptedSerializer}, auth=[])
    def post(self, request):
        email = validated(RecoverSerializer, request.data)["email"]
        # Queued, never looked up here: the answer's timing must not tell whether the
        # email has an account (relay.tasks.mail_key_recovery).
        try:
            mail_key_recovery.delay(email)
        except Exception:
            logger.exception("could not queue a key recovery request; the requester may ask again")
        return Response({"status": "accepted"}, status=status.HTTP_202_ACCEPTED)


class RecoverConfirmView(PublicAccountView):
    throttle_scope = "recover_confirm"

    @extend_schema(operation_id="accounts_recover_confirm",
                   summary="Confirm a recovery: a new key, every other key of the account revoked",
                   request=RecoverConfirmSerializer, responses={200: RecoveredSerializer}, auth=[])
    def post(self, request):
        body = validated(RecoverConfirmSerializer, request.data)
        _, key = services.recovery_confirm(link_token=body["token"], code=body["code"])
        return Response({"api_key": key})


class AccountView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="account_get", summary="Your account", responses=AccountSerializer)
    def get(self, request):
        return Response(AccountSerializer(request.user.owner).data)


class KeyCollectionView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="keys_list", summary="Your API keys (never the keys themselves)",
                   parameters=PAGE_PARAMETERS, responses=paginated(ApiKeySerializer))
    def get(self, request):
        api_keys = ApiKey.objects.filter(account=request.user.owner).order_by("-created_at", "-id")
        return page_response(request, self, api_keys, ApiKeySerializer)

    @extend_schema(operation_id="keys_create", summary="A new API key, shown once", request=EmptySerializer,
                   responses={201: ApiKeyCreatedSerializer})
    def post(self, request):
        validated(EmptySerializer, request.data)
        api_key, key = credentials.api_key_create(account=request.user.owner)
        return Response({**ApiKeySerializer(api_key).data, "api_key": key}, status=status.HTTP_201_CREATED)


class KeyDetailView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="keys_revoke", summary="Revoke a key: it is 401 from then on",
                   responses={204: OpenApiResponse(description="Revoked.")})
    def delete(self, request, key_id):
        credentials.api_key_revoke(account=request.user.owner, key_id=key_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
