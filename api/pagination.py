from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination


class RelayPagination(PageNumberPagination):
    """Page numbers as docs/api.md lists them. A malformed `page` or `page_size` is a 400
    saying what is wrong, not DRF's 404 "Invalid page"; a page past the end is a 404."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def paginate_queryset(self, queryset, request, view=None):
        bounds = {self.page_query_param: 999_999_999, self.page_size_query_param: self.max_page_size}
        for name, most in bounds.items():
            value = request.query_params.get(name)
            if value is not None and not (value.isdigit() and 0 < int(value) <= most):
                raise ValidationError({name: [f"{name} must be an integer from 1 to {most}."]})
        return super().paginate_queryset(queryset, request, view)
