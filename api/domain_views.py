"""The domain routes of docs/api.md: add a domain of one's own, list, look at, verify by
DNS, remove. An account's API key only: a mailbox token has no domains."""
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.authentication import IsAccount
from api.domain_serializers import DomainCreateSerializer, DomainSerializer
from api.schema import PAGE_PARAMETERS, paginated
from api.fields import validated
from api.pagination import page_response
from domains.services import domain_create, domain_get, domain_verify, domains_of
from mailboxes.domain_removal import domain_delete


class DomainCollectionView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="domains_list", summary="Your domains, newest first", parameters=PAGE_PARAMETERS,
                   responses=paginated(DomainSerializer))
    def get(self, request):
        return page_response(request, self, domains_of(request.user.owner), DomainSerializer)

    @extend_schema(operation_id="domains_create", summary="Add a domain of your own; returns the records to publish",
                   request=DomainCreateSerializer, responses={201: DomainSerializer})
    def post(self, request):
        body = validated(DomainCreateSerializer, request.data)
        domain = domain_create(owner=request.user.owner, name=body["name"])
        return Response(DomainSerializer(domain).data, status=status.HTTP_201_CREATED)


class DomainDetailView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="domains_get", summary="One of your domains", responses=DomainSerializer)
    def get(self, request, domain_id):
        return Response(DomainSerializer(domain_get(owner=request.user.owner, domain_id=domain_id)).data)

    @extend_schema(operation_id="domains_delete", summary="Remove a domain (409 while active mailboxes use it)",
                   responses={204: OpenApiResponse(description="Deleted.")})
    def delete(self, request, domain_id):
        domain_delete(owner=request.user.owner, domain_id=domain_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DomainVerifyView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="domains_verify", summary="Look the records up now; verified once MX and DKIM match",
                   request=None, responses=DomainSerializer)
    def post(self, request, domain_id):
        return Response(DomainSerializer(domain_verify(owner=request.user.owner, domain_id=domain_id)).data)
