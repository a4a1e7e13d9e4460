"""The owner on each message (Message.owner), so an owner's search filters on an index
instead of hashing all their mailboxes (docs/benchmarks.md, "Message search"). The
messages already stored get their mailbox's owner when the mailbox is visible, before
the index is built over them."""
import django.db.models.deletion
from django.db import migrations, models

# The mailbox's owner while it is active or expired; a deleted one's mail stays ownerless.
BACKFILL = """
UPDATE mailboxes_message SET owner_id = (
    SELECT m.owner_id FROM mailboxes_mailbox m
    WHERE m.id = mailboxes_message.mailbox_id AND m.status IN ('active', 'expired'))
"""


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('mailboxes', '0017_lighter_ingest'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='owner',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True,
                                    on_delete=django.db.models.deletion.DO_NOTHING, related_name='+',
                                    to='accounts.account'),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop, elidable=True),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(condition=models.Q(('owner__isnull', False)), fields=['owner', '-received_at'],
                               name='message_owner_list'),
        ),
    ]
