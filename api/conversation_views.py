"""Replies, forwards and threads (docs/api.md, "Conversations"). Sending itself is
POST /mailboxes/{id}/messages (api/views.py)."""
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api.conversation_serializers import (
    ForwardSerializer,
    ReplySerializer,
    SendAcceptedSerializer,
    ThreadDetailSerializer,
    ThreadSerializer,
)
from api.pagination import RelayPagination
from api.schema import PAGE_PARAMETERS, paginated
from api.fields import validated
from api.views import queued
from mailboxes.threads import thread_get, thread_list, thread_messages, thread_participants
from relay import reading
from relay.outbox.outbound import forward_queue, reply_queue


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
