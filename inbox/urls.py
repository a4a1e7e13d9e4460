from django.urls import path

from inbox import views

urlpatterns = [
    path("new", views.anonymous_new, name="inbox-new"),
    path("sign-in", views.sign_in, name="inbox-sign-in"),
    path("sign-in/<str:link_token>", views.sign_in_link, name="inbox-sign-in-link"),
    path("sign-out", views.sign_out, name="inbox-sign-out"),
    path("mailboxes", views.account_mailboxes, name="inbox-mailboxes"),
    path("staff/<int:message_id>/html", views.staff_message_html, name="inbox-staff-html"),
    path("staff/<int:message_id>/cid/<str:content_id>", views.staff_message_part, name="inbox-staff-part"),
    path("<uuid:mailbox_id>", views.mailbox_page, name="inbox-mailbox"),
    path("<uuid:mailbox_id>/rows", views.mailbox_rows, name="inbox-rows"),
    path("<uuid:mailbox_id>/events", views.mailbox_events, name="inbox-events"),
    path("<uuid:mailbox_id>/renew", views.mailbox_renew, name="inbox-renew"),
    path("<uuid:mailbox_id>/delete", views.mailbox_remove, name="inbox-delete"),
    path("<uuid:mailbox_id>/<int:message_id>", views.message_page, name="inbox-message"),
    path("<uuid:mailbox_id>/<int:message_id>/html", views.message_html, name="inbox-message-html"),
    path("<uuid:mailbox_id>/<int:message_id>/cid/<str:content_id>", views.message_part, name="inbox-message-part"),
    path("<uuid:mailbox_id>/<int:message_id>/message.eml", views.message_download, name="inbox-message-eml"),
    path("<uuid:mailbox_id>/<int:message_id>/attachments/<int:number>", views.message_download,
         name="inbox-attachment"),
    path("<uuid:mailbox_id>/<int:message_id>/<str:how>", views.message_send, name="inbox-send"),
]
