from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    # The site root (and the admin's "View site") shows the API docs.
    path("", RedirectView.as_view(pattern_name="docs"), name="home"),
    path("api/", RedirectView.as_view(pattern_name="docs")),
    path("api/v1/", include("api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("admin/", admin.site.urls),
]

handler500 = "api.errors.server_error"
