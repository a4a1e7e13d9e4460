from django.urls import path

from core.pools import SPAM_CHECKS, pooled_page
from inbox import views


def spam_pool(request, kwargs):
    """The spam pool's threads for what waits on spamd: the Checks tab's spam section, or a
    message page asked to show it at once (views.FETCHED_AFTER)."""
    return SPAM_CHECKS if kwargs.get("section") == "spam" or request.GET.get("spam") == "1" else None


urlpatterns = [
    path("new", pooled_page(views.anonymous_new), name="inbox-new"),
    path("sign-in", pooled_page(views.sign_in), name="inbox-sign-in"),
    path("sign-in/<str:link_token>", pooled_page(views.sign_in_link), name="inbox-sign-in-link"),
    path("sign-out", pooled_page(views.sign_out), name="inbox-sign-out"),
    path("mailboxes", pooled_page(views.account_mailboxes), name="inbox-mailboxes"),
    path("apps", pooled_page(views.connected_apps), name="inbox-apps"),
    path("staff/<int:message_id>/html", pooled_page(views.staff_message_html), name="inbox-staff-html"),
    path("staff/<int:message_id>/cid/<str:content_id>", pooled_page(views.staff_message_part), name="inbox-staff-part"),
    path("<uuid:mailbox_id>", pooled_page(views.mailbox_page), name="inbox-mailbox"),
    path("<uuid:mailbox_id>/events", views.mailbox_events, name="inbox-events"),
    path("<uuid:mailbox_id>/renew", pooled_page(views.mailbox_renew), name="inbox-renew"),
    path("<uuid:mailbox_id>/delete", pooled_page(views.mailbox_remove), name="inbox-delete"),
    path("<uuid:mailbox_id>/smtp-password", pooled_page(views.sandbox_password), name="inbox-smtp-password"),
    path("<uuid:mailbox_id>/faults", pooled_page(views.sandbox_faults), name="inbox-faults"),
    path("<uuid:mailbox_id>/<int:message_id>", pooled_page(views.message_page, spam_pool), name="inbox-message"),
    path("<uuid:mailbox_id>/<int:message_id>/html", pooled_page(views.message_html), name="inbox-message-html"),
    path("<uuid:mailbox_id>/<int:message_id>/cid/<str:content_id>", pooled_page(views.message_part),
         name="inbox-message-part"),
    path("<uuid:mailbox_id>/<int:message_id>/message.eml", pooled_page(views.message_download),
         name="inbox-message-eml"),
    path("<uuid:mailbox_id>/<int:message_id>/attachments/<int:number>", pooled_page(views.message_download),
         name="inbox-attachment"),
    path("<uuid:mailbox_id>/<int:message_id>/checks/<str:section>", pooled_page(views.message_check_section, spam_pool),
         name="inbox-check-section"),
    path("<uuid:mailbox_id>/<int:message_id>/check-links", pooled_page(views.message_check_links),
         name="inbox-check-links"),
    path("<uuid:mailbox_id>/<int:message_id>/<str:how>", pooled_page(views.message_send), name="inbox-send"),
]
