"""What the mail reader keeps (relay/mailserver/): per mailbox, the JMAP state it has read
up to and the server's marker of the account; per message, its id on the server, unique
within the mailbox, so that a message is stored once whatever happens. Existing rows
get empty values (database defaults), which no mail from Relay's own SMTP ever changes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mailboxes', '0012_content_codes_and_links'),
    ]

    operations = [
        migrations.AddField(
            model_name='mailbox',
            name='server_marker',
            field=models.CharField(blank=True, db_default='', default='', max_length=255),
        ),
        migrations.AddField(
            model_name='mailbox',
            name='server_state',
            field=models.CharField(blank=True, db_default='', default='', max_length=255),
        ),
        migrations.AddField(
            model_name='message',
            name='server_id',
            field=models.CharField(blank=True, db_default='', default='', max_length=255),
        ),
        migrations.AddConstraint(
            model_name='message',
            constraint=models.UniqueConstraint(condition=models.Q(('server_id', ''), _negated=True), fields=('mailbox', 'server_id'), name='message_stored_once'),
        ),
    ]
