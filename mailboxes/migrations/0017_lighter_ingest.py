"""What storing a message costs PostgreSQL, cut (docs/benchmarks.md, "SMTP ingest, round
four"): the message's index on its mailbox alone goes (message_mailbox_list starts with
the mailbox and serves every look-up it served), and the contents' large columns are
compressed with LZ4 where the server has it, several times cheaper than the default
pglz for the same bytes. Rows stored before keep their compression; reads take both."""
from django.db import migrations, models
import django.db.models.deletion

COLUMNS = ("raw", "text", "html", "words")


def lz4(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    columns = ", ".join(f"ALTER COLUMN {column} SET COMPRESSION lz4" for column in COLUMNS)
    # A server built without LZ4 refuses it (feature_not_supported): pglz then stays.
    schema_editor.execute(
        "DO $$ BEGIN"
        f" EXECUTE 'ALTER TABLE mailboxes_messagecontent {columns}';"
        " EXCEPTION WHEN feature_not_supported THEN RAISE NOTICE 'no LZ4 here: pglz stays';"
        " END $$")


def pglz(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    columns = ", ".join(f"ALTER COLUMN {column} SET COMPRESSION pglz" for column in COLUMNS)
    schema_editor.execute(f"ALTER TABLE mailboxes_messagecontent {columns}")


class Migration(migrations.Migration):

    dependencies = [
        ('mailboxes', '0016_conversations'),
    ]

    operations = [
        migrations.AlterField(
            model_name='message',
            name='mailbox',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='messages', to='mailboxes.mailbox'),
        ),
        migrations.RunPython(lz4, pglz),
    ]
