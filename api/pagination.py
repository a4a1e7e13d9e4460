from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator
from django.db.models import Count, Window
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from accounts.inputs import whole_number
from api.serializers import RenderedOnce
from relay.reading import OwnerWordSearch

# A page of a list, unless the client asks for another size: also how many a wait's
# answer and an MCP list tool return.
PAGE_SIZE = 50


class RelayPagination(PageNumberPagination):
    """Page numbers as docs/api.md lists them. A malformed `page` or `page_size` is a 400
    saying what is wrong, not DRF's 404 "Invalid page"; a page past the end is a 404."""

    page_size = PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = 200

    def paginate_queryset(self, queryset, request, view=None):
        bounds = {self.page_query_param: 999_999_999, self.page_size_query_param: self.max_page_size}
        for name, most in bounds.items():
            whole_number(request.query_params.get(name), field=name, low=1, high=most)
        return super().paginate_queryset(queryset, request, view)


class CountedWithPage(Paginator):
    """A paginator reading the count with the page (`COUNT(*) OVER ()`), for a word search,
    whose separate count would repeat the search."""

    def page(self, number):
        try:
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger("That page number is not an integer")
        if number < 1:
            raise EmptyPage("That page number is less than 1")
        bottom = (number - 1) * self.per_page
        if isinstance(self.object_list, OwnerWordSearch):  # written out (relay.reading)
            rows = self.object_list.page_with_total(bottom, self.per_page)
        else:
            rows = list(self.object_list.annotate(relay_total=Window(Count("*")))[bottom:bottom + self.per_page])
        if not rows and number > 1:
            raise EmptyPage("That page contains no results")
        self.__dict__["count"] = rows[0].relay_total if rows else 0  # Paginator.count is a cached property
        return self._get_page(rows, number, self)


def page_response(request, view, rows, serializer_class, *, count_with_page: bool = False) -> Response:
    """One page of `rows` as a list route answers it (`count_with_page`: the total read with
    the page in one statement, for a word search)."""
    paginator = RelayPagination()
    if count_with_page:
        paginator.django_paginator_class = CountedWithPage
    page = paginator.paginate_queryset(rows, request, view=view)
    if issubclass(serializer_class, RenderedOnce):
        return paginator.get_paginated_response(serializer_class.represent_many(page))
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
