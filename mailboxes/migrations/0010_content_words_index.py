"""The GIN index behind `q` (docs/api.md), on PostgreSQL only: SQLite has no GIN and no
tsvector, and matches `q` as a substring instead."""
from django.db import migrations

INDEX = "content_words_gin"


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON mailboxes_messagecontent USING gin (words)")


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("mailboxes", "0009_labels_and_words")]
    operations = [migrations.RunPython(create, drop)]
