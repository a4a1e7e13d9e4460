"""Relay's URLs and the API benchmark's baseline route (bench/baseline_asgi.py)."""
from django.http import Http404, JsonResponse
from django.urls import include, path

from core.pools import in_pool


def _select(mailbox_id):
    from mailboxes.models import Mailbox

    return (Mailbox.objects.filter(pk=mailbox_id)
            .values("id", "address", "status", "created_at", "expires_at", "expired_at", "message_count").first())


select = in_pool(_select)  # in the shared thread pool, as the API's sync views run


async def mailbox(request, mailbox_id):
    row = await select(mailbox_id)
    if row is None:
        raise Http404()
    return JsonResponse(row)


urlpatterns = [path("baseline/mailboxes/<uuid:mailbox_id>", mailbox), path("", include("config.urls"))]
