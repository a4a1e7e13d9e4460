from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api import health, metrics, oauth, pages
from core.pools import pooled_page
from inbox import views as inbox

urlpatterns = [
    # The site root is the web inbox's home (docs/inbox.md); it links the API docs.
    path("", pooled_page(inbox.home), name="home"),
    path("inbox/", include("inbox.urls")),
    path("favicon.ico", inbox.favicon, name="favicon"),
    path("api/", RedirectView.as_view(pattern_name="docs")),
    # OAuth for hosted agents: the metadata documents at the root, the endpoints under /oauth/.
    path("", include((
        [*oauth.urlpatterns, path("oauth/authorize", pooled_page(inbox.Consent.as_view(), oauth.consent_pool),
                                name="authorize")],
        oauth.app_name))),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("api/v1/", include("api.urls")),
    # The links in activation and recovery mails (site root, short, as mailed).
    path("activate/<str:link_token>", pages.activate_page, name="activate-page"),
    path("recover/<str:link_token>", pages.recover_page, name="recover-page"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("admin/", admin.site.urls),
]

handler404 = "inbox.views.not_found"
handler500 = "api.errors.server_error"
