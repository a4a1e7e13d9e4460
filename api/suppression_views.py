"""The suppression list of docs/delivery.md: the addresses an account's mail no longer goes
to, because they bounced for good or complained; an account removes one to send again."""
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.authentication import IsAccount
from api.pagination import page_response
from api.schema import PAGE_PARAMETERS, paginated
from api.serializers import SuppressionSerializer
from relay.outbox.delivery import suppression_list, suppression_remove


class SuppressionCollectionView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="suppressions_list", summary="Addresses your mail no longer goes to, newest first",
                   parameters=PAGE_PARAMETERS, responses=paginated(SuppressionSerializer))
    def get(self, request):
        return page_response(request, self, suppression_list(account_id=request.user.owner.id), SuppressionSerializer)


class SuppressionDetailView(APIView):
    permission_classes = [IsAccount]

    @extend_schema(operation_id="suppressions_delete", summary="Send to this address again",
                   responses={204: OpenApiResponse(description="Removed from the list.")})
    def delete(self, request, address):
        suppression_remove(account_id=request.user.owner.id, address=address)
        return Response(status=status.HTTP_204_NO_CONTENT)
