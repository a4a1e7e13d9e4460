from django.urls import path, register_converter
from django.views.decorators.csrf import csrf_exempt

from api import account_views, check_views, domain_views, suppression_views, views, waiting, webhook_views
from core.pools import DNS_CHECKS, SPAM_CHECKS, in_pool, pooled, rendered_where_made


class RowIdConverter:
    """A positive integer that fits a bigint: larger ones are 404, not a database error."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(RowIdConverter, "rowid")

_messages = views.MessageCollectionView.as_view()
_messages_in_pool = in_pool(rendered_where_made(_messages))


@csrf_exempt
async def message_collection(request, mailbox_id):
    """The message list and send (DRF), except a GET with `wait`, which is held without
    a thread (api/waiting.py)."""
    if request.method == "GET" and "wait" in request.GET:
        return await waiting.wait_for_messages(request, mailbox_id)
    return await _messages_in_pool(request, mailbox_id=mailbox_id)


# drf-spectacular documents the DRF view behind it.
message_collection.cls, message_collection.initkwargs = _messages.cls, _messages.initkwargs

urlpatterns = [
    path("", pooled(views.IndexView.as_view()), name="index"),
    path("whoami", pooled(views.WhoAmIView.as_view()), name="whoami"),
    path("accounts", pooled(account_views.SignUpView.as_view()), name="account-signup"),
    path("accounts/activate", pooled(account_views.ActivateView.as_view()), name="account-activate"),
    path("accounts/recover", pooled(account_views.RecoverView.as_view()), name="account-recover"),
    path("accounts/recover/confirm", pooled(account_views.RecoverConfirmView.as_view()), name="account-recover-confirm"),
    path("account", pooled(account_views.AccountView.as_view()), name="account"),
    path("keys", pooled(account_views.KeyCollectionView.as_view()), name="key-list"),
    path("keys/<rowid:key_id>", pooled(account_views.KeyDetailView.as_view()), name="key-detail"),
    path("webhooks", pooled(webhook_views.WebhookCollectionView.as_view()), name="webhook-list"),
    path("webhooks/<rowid:webhook_id>", pooled(webhook_views.WebhookDetailView.as_view()), name="webhook-detail"),
    path("webhooks/<rowid:webhook_id>/deliveries", pooled(webhook_views.WebhookDeliveriesView.as_view()),
         name="webhook-deliveries"),
    path("suppressions", pooled(suppression_views.SuppressionCollectionView.as_view()), name="suppression-list"),
    path("suppressions/<str:address>", pooled(suppression_views.SuppressionDetailView.as_view()),
         name="suppression-detail"),
    path("domains", pooled(domain_views.DomainCollectionView.as_view()), name="domain-list"),
    path("domains/<uuid:domain_id>", pooled(domain_views.DomainDetailView.as_view()), name="domain-detail"),
    path("domains/<uuid:domain_id>/verify", pooled(domain_views.DomainVerifyView.as_view(), DNS_CHECKS), name="domain-verify"),
    path("mailboxes", pooled(views.MailboxCollectionView.as_view()), name="mailbox-list"),
    path("messages", pooled(views.MessageSearchView.as_view()), name="message-search"),
    path("mailboxes/<uuid:mailbox_id>", pooled(views.MailboxDetailView.as_view()), name="mailbox-detail"),
    path("mailboxes/<uuid:mailbox_id>/renew", pooled(views.MailboxRenewView.as_view()), name="mailbox-renew"),
    path("mailboxes/<uuid:mailbox_id>/smtp-password", pooled(views.SandboxPasswordView.as_view()),
         name="sandbox-smtp-password"),
    path("mailboxes/<uuid:mailbox_id>/faults", pooled(views.SandboxFaultsView.as_view()), name="sandbox-faults"),
    path("mailboxes/<uuid:mailbox_id>/messages", message_collection, name="message-list"),
    path("mailboxes/<uuid:mailbox_id>/events", waiting.mailbox_events, name="mailbox-events"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>", pooled(views.MessageDetailView.as_view()), name="message-detail"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/raw", pooled(views.MessageRawView.as_view()), name="message-raw"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/attachments/<rowid:attachment_id>",
         pooled(views.AttachmentView.as_view()), name="message-attachment"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/reply", pooled(views.ReplyView.as_view()),
         name="message-reply"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/forward",
         pooled(views.ForwardView.as_view()), name="message-forward"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/release",
         pooled(views.ReleaseView.as_view()), name="message-release"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/checks/html",
         pooled(check_views.HtmlCheckView.as_view()), name="check-html"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/checks/links",
         pooled(check_views.LinkCheckView.as_view()), name="check-links"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/checks/spam",
         pooled(check_views.SpamCheckView.as_view(), SPAM_CHECKS), name="check-spam"),
    path("mailboxes/<uuid:mailbox_id>/messages/<rowid:message_id>/checks/headers",
         pooled(check_views.HeaderCheckView.as_view()), name="check-headers"),
    path("mailboxes/<uuid:mailbox_id>/threads", pooled(views.ThreadCollectionView.as_view()),
         name="thread-list"),
    path("mailboxes/<uuid:mailbox_id>/threads/<rowid:thread_id>", pooled(views.ThreadDetailView.as_view()),
         name="thread-detail"),
    path("mailboxes/<uuid:mailbox_id>/outbox", pooled(views.OutboundCollectionView.as_view()), name="outbound-list"),
    path("mailboxes/<uuid:mailbox_id>/outbox/<rowid:outbound_id>", pooled(views.OutboundDetailView.as_view()), name="outbound-detail"),
]
