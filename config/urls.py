from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api import health, pages

# The operator's admin: titled, and without the side navigation, so that the lists (the
# dead letters above all) fit a 1280 px window without scrolling sideways.
admin.site.site_header = admin.site.site_title = "Relay administration"
admin.site.enable_nav_sidebar = False

urlpatterns = [
    # The site root (and the admin's "View site") shows the API docs.
    path("", RedirectView.as_view(pattern_name="docs"), name="home"),
    path("api/", RedirectView.as_view(pattern_name="docs")),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("api/v1/", include("api.urls")),
    # The links in activation and recovery mails (site root, short, as mailed).
    path("activate/<str:link_token>", pages.activate_page, name="activate-page"),
    path("recover/<str:link_token>", pages.recover_page, name="recover-page"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("admin/", admin.site.urls),
]

handler500 = "api.errors.server_error"
