from django.db import migrations, models
from django.db.models import Count


def count_live(apps, schema_editor):
    Owner = apps.get_model("mailboxes", "Owner")
    Mailbox = apps.get_model("mailboxes", "Mailbox")
    live = (Mailbox.objects.filter(owner__isnull=False, status__in=("provisioning", "active"))
            .values_list("owner_id").annotate(n=Count("id")).order_by())
    for owner_id, n in live:
        Owner.objects.filter(id=owner_id).update(live_mailboxes=n)


class Migration(migrations.Migration):

    dependencies = [
        ("mailboxes", "0003_message_content"),
    ]

    operations = [
        migrations.AddField(model_name="owner", name="live_mailboxes",
                            field=models.PositiveIntegerField(default=0)),
        migrations.RunPython(count_live, migrations.RunPython.noop),
    ]
