"""A mailbox rendered from fields bound once (api.serializers.RenderedOnce) is what DRF's
own rendering of the same serializer gives, for every state and label a mailbox has."""
from datetime import timedelta

from api.serializers import MailboxSerializer
from mailboxes.models import Mailbox
from tests.helpers import create_mailbox, earlier, expire_now


def test_a_mailbox_renders_as_drf_renders_it_whatever_its_state(client_pro):
    labelled = create_mailbox(client_pro, name="Signup flow", tags=["ci", "login"], metadata={"run": 7, "ok": True})
    bare = create_mailbox(client_pro)
    earlier(Mailbox.objects.filter(id=bare["id"]), timedelta(minutes=11), "created_at", "expires_at")
    expire_now(Mailbox.objects.get(id=bare["id"]))
    for mailbox in Mailbox.objects.filter(id__in=[labelled["id"], bare["id"]]):
        assert MailboxSerializer.represent(mailbox) == MailboxSerializer(mailbox).data
        assert client_pro.get(f"/api/v1/mailboxes/{mailbox.id}").json() == MailboxSerializer(mailbox).data
    statuses = {mailbox.status for mailbox in Mailbox.objects.filter(id__in=[labelled["id"], bare["id"]])}
    assert statuses == {"active", "expired"}
