"""Rows written before a column existed get it filled, so no code keeps a branch for them:
the codes and links of message contents stored before mailboxes' 0012 (computed from
their subject and text, as storing computes them), and the wire bytes of outbox mails
still owed that were queued before 0002 (built as mail_queue builds them)."""
from django.core.mail import EmailMultiAlternatives
from django.db import migrations

BATCH = 500


def fill(apps, schema_editor):
    from mailboxes.mail_format import text_of_html
    from relay.ingest import find_codes, find_links

    MessageContent = apps.get_model("mailboxes", "MessageContent")
    Message = apps.get_model("mailboxes", "Message")
    while True:
        contents = list(MessageContent.objects.filter(codes__isnull=True).only("id", "text", "html")[:BATCH])
        for content in contents:
            subject = Message.objects.filter(content_id=content.id).values_list("subject", flat=True).first() or ""
            content.codes = find_codes(subject, content.text or text_of_html(content.html))
            content.links = find_links(content.text, content.html)
        MessageContent.objects.bulk_update(contents, ["codes", "links"])
        if len(contents) < BATCH:
            break
    MessageContent.objects.filter(links__isnull=True).update(links=[])

    OutboxMail = apps.get_model("relay", "OutboxMail")
    for mail in OutboxMail.objects.filter(status__in=("queued", "sending"), message=b"").iterator():
        email = EmailMultiAlternatives(subject=mail.subject, body=mail.text, from_email=mail.from_email, to=mail.to)
        if mail.html:
            email.attach_alternative(mail.html, "text/html")
        OutboxMail.objects.filter(id=mail.id).update(message=email.message().as_bytes(linesep="\r\n"))


class Migration(migrations.Migration):

    dependencies = [
        ('relay', '0003_backendcallslot'),
        ('mailboxes', '0013_read_from_the_mail_server'),
    ]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
