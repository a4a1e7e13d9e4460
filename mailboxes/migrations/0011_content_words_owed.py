"""The contents whose search words are still owed (SMTP stores a message without them;
relay.tasks.index_owed_words writes them), found without reading the table: a partial
index on PostgreSQL only, where the words are kept. Built CONCURRENTLY, so a deployment
with millions of messages keeps taking mail while it is built."""
from django.db import migrations

INDEX = "content_words_owed"


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON mailboxes_messagecontent (id) WHERE words IS NULL")


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("mailboxes", "0010_content_words_index")]
    operations = [migrations.RunPython(create, drop)]
