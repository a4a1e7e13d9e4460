"""Takes over mailboxes' Owner and ApiKey tables (renamed by mailboxes.0005) as Account
and ApiKey, then gives them what docs/api.md asks: an email, a login, a status with its
timestamps, and one-time tokens. Every owner that existed becomes an active account."""
import django.db.models.deletion
import django.db.models.functions.text
from django.db import migrations, models
from django.db.models import F


def owners_become_active_accounts(apps, schema_editor):
    Account = apps.get_model("accounts", "Account")
    Account.objects.update(status="active", activated_at=F("created_at"), status_changed_at=F("created_at"))


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("mailboxes", "0005_owner_tables_to_accounts"),
    ]

    operations = [
        # The tables as mailboxes left them: state only.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Account",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.CharField(max_length=100, unique=True)),
                        ("plan", models.CharField(choices=[("free", "Free"), ("pro", "Pro"), ("enterprise", "Enterprise")], default="free", max_length=16)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("live_mailboxes", models.PositiveIntegerField(default=0)),
                    ],
                ),
                migrations.CreateModel(
                    name="ApiKey",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("prefix", models.CharField(help_text="The key's first characters, to tell keys apart.", max_length=12)),
                        ("key_hash", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("owner", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="api_keys", to="accounts.account")),
                    ],
                ),
            ],
        ),
        # What accounts add.
        migrations.RenameField("account", "name", "login"),
        migrations.RenameField("apikey", "owner", "account"),
        migrations.AddField("account", "email", models.EmailField(blank=True, max_length=254, null=True)),
        migrations.AddField("account", "status", models.CharField(
            choices=[("provisioned", "Provisioned"), ("active", "Active"), ("suspended", "Suspended")],
            default="provisioned", max_length=12)),
        migrations.AddField("account", "status_changed_at", models.DateTimeField(blank=True, null=True)),
        migrations.AddField("account", "activated_at", models.DateTimeField(blank=True, null=True)),
        migrations.AddField("account", "suspended_at", models.DateTimeField(blank=True, null=True)),
        migrations.AddField("account", "unsuspended_at", models.DateTimeField(blank=True, null=True)),
        migrations.AddConstraint("account", models.UniqueConstraint(
            django.db.models.functions.text.Lower("email"), name="account_email_unique_ci")),
        migrations.AddField("apikey", "last_used_at", models.DateTimeField(blank=True, null=True)),
        migrations.RunPython(owners_become_active_accounts, migrations.RunPython.noop),
        migrations.CreateModel(
            name="Token",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("action", models.CharField(choices=[("activation", "Activation"), ("key_recovery", "Key Recovery")], max_length=16)),
                ("secret_hash", models.CharField(max_length=64, unique=True)),
                ("code_hash", models.CharField(max_length=64)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("expires_at", models.DateTimeField()),
                ("consumed_at", models.DateTimeField(blank=True, null=True)),
                ("wrong_codes", models.PositiveSmallIntegerField(default=0)),
                ("account", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="tokens", to="accounts.account")),
            ],
            options={
                "indexes": [models.Index(condition=models.Q(("consumed_at", None)), fields=["account", "action"], name="token_usable")],
            },
        ),
    ]
