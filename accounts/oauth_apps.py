"""The agents an account let in (docs/inbox.md, "Apps and keys"): every application holding
something that can still act for the account, and revoking all of it at once. "Can still
act" is the toolkit's own test, put to the database's clock: an access token before its
`expires`; a refresh token unrevoked whose access token is still on record and expired less
than REFRESH_TOKEN_EXPIRE_SECONDS ago (oauth2_validators.validate_refresh_token); an
authorization code before its `expires`."""
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models.functions import Now
from oauth2_provider.models import (get_access_token_model, get_application_model, get_grant_model,
                                    get_refresh_token_model, refresh_token_expire_timedelta)

from accounts.models import Account


@dataclass
class ConnectedApp:
    application: object  # the toolkit's Application
    granted: datetime  # the oldest of its credentials that can still act
    scopes: list[str] = field(default_factory=list)  # what they may do together, sorted


def oauth_apps_of(account: Account) -> list[ConnectedApp]:
    """Each application that can still act for `account`, the most recently granted first."""
    if account.oauth_user_id is None:
        return []
    user_id = account.oauth_user_id
    refresh_lifetime = refresh_token_expire_timedelta()
    refreshable = get_refresh_token_model().objects.filter(user_id=user_id, revoked=None,
                                                            access_token__isnull=False)
    if refresh_lifetime is not None:
        refreshable = refreshable.filter(access_token__expires__gt=Now() - refresh_lifetime)
    acting = [
        *get_access_token_model().objects.filter(user_id=user_id, expires__gt=Now())
        .values_list("application_id", "scope", "created"),
        # What a refresh token mints is its access token's scope.
        *refreshable.values_list("application_id", "access_token__scope", "created"),
        *get_grant_model().objects.filter(user_id=user_id, expires__gt=Now())
        .values_list("application_id", "scope", "created"),
    ]
    applications = get_application_model().objects.in_bulk({application_id for application_id, _, _ in acting})
    apps: dict[int, ConnectedApp] = {}
    for application_id, scope, created in acting:
        if application_id not in applications:
            continue  # a registration access token's own application row was deleted meanwhile
        app = apps.setdefault(application_id, ConnectedApp(application=applications[application_id], granted=created))
        app.granted = min(app.granted, created)
        app.scopes = sorted({*app.scopes, *(scope or "").split()})
    return sorted(apps.values(), key=lambda app: app.granted, reverse=True)


def oauth_app_revoke(*, account: Account, application_id: int) -> None:
    """End everything `application_id` holds for `account`: its unused authorization codes,
    its refresh tokens and its access tokens, in one transaction. Each access token deleted
    goes through accounts.oauth.token_revoked (the receiver the toolkit's own deletions take
    too), which forgets it in this process and raises the revocation counter after the
    commit, so every other process refuses it on its next request."""
    if account.oauth_user_id is None:
        return
    scope = {"user_id": account.oauth_user_id, "application_id": application_id}
    with transaction.atomic():
        get_grant_model().objects.filter(**scope).delete()
        # Revoked rather than deleted, as the toolkit revokes them: a revoked refresh token
        # presented again is how reuse is told apart from a client that never had one.
        get_refresh_token_model().objects.filter(revoked=None, **scope).update(revoked=Now(), updated=Now())
        get_access_token_model().objects.filter(**scope).delete()
