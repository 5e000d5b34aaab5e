"""Page-number pagination whose cost does not grow with the list: the API's lists answer in bounded time.

DRF's PageNumberPagination runs COUNT(*) over the whole filtered set on every page. Here a page reads
one row more than it shows, which answers `next` on its own; a page that is the last one knows the
exact `count` without counting (offset + rows: most lists, which fit on one page, cost no COUNT at all);
only a page with more after it counts, and then at most COUNT_BOUND rows (`SELECT COUNT(*) FROM (...
LIMIT n)`). So `count` is exact up to COUNT_BOUND and says COUNT_BOUND for anything longer: walk `next`
until it is null rather than computing pages from `count` (docs/API.md, "Pagination").

`?page_size=` picks the page size, 1 to MAX_PAGE_SIZE; anything else is a 400 naming the parameter.
The response keeps DRF's shape: {count, next, previous, results}.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

MAX_PAGE_SIZE = 200
COUNT_BOUND = 10_000
# PostgreSQL's OFFSET is a bigint: a page past this would overflow it (a 500), so it is a 404 like any page
# past the end. MAX_PAGE x MAX_PAGE_SIZE stays far below 2**63.
MAX_PAGE = 10**15
MAX_DIGITS = len(str(MAX_PAGE))


def _whole_number(text: str) -> int | None:
    """`text` as a positive int, or None ("²" passes str.isdigit() but is no number: isascii first; and
    int() refuses strings of over 4,300 digits, so longer ones are no number either)."""
    if not (text.isascii() and text.isdigit()) or len(text.lstrip("0")) > MAX_DIGITS:
        return None
    return int(text) or None


class BoundedPageNumberPagination(PageNumberPagination):
    """`?page=` and `?page_size=` as before; `count` counted at most up to COUNT_BOUND, and only when needed."""

    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    count_bound = COUNT_BOUND

    def get_page_size(self, request: Request) -> int:
        given = request.query_params.get(self.page_size_query_param)
        if given is None or given == "":
            return self.page_size
        size = _whole_number(given)
        if size is None or size > self.max_page_size:
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        _("Give a whole number of items per page from 1 to %(most)s.") % {"most": self.max_page_size}
                    ]
                }
            )
        return size

    def page_number_of(self, request: Request) -> int:
        given = request.query_params.get(self.page_query_param) or "1"
        number = _whole_number(given)
        if number is None or number > MAX_PAGE:
            raise NotFound(_("Invalid page: give a whole number from 1 to %(most)s.") % {"most": f"{MAX_PAGE:,}"})
        return number

    def paginate_queryset(self, queryset: QuerySet, request: Request, view=None) -> list[Any] | None:
        self.request = request
        page_size = self.get_page_size(request)
        if not page_size:
            return None
        self.page_size_now = page_size
        self.page_number = self.page_number_of(request)
        offset = (self.page_number - 1) * page_size
        rows = list(queryset[offset : offset + page_size + 1])  # one more than shown: is there a next page?
        self.has_next = len(rows) > page_size
        rows = rows[:page_size]
        if not rows and self.page_number > 1:
            raise NotFound(_("Invalid page."))
        if self.has_next:
            self.count = max(self.bounded_count(queryset), offset + page_size + 1)
        else:
            self.count = offset + len(rows)  # the last page: exact without counting
        return rows

    def bounded_count(self, queryset: QuerySet) -> int:
        """COUNT(*) over at most count_bound rows: `count` costs the same for 10^4 rows as for 10^7."""
        return min(queryset.order_by()[: self.count_bound].count(), self.count_bound)

    def get_paginated_response(self, data) -> Response:
        return Response(
            {
                "count": self.count,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )

    def get_next_link(self) -> str | None:
        if not self.has_next:
            return None
        return replace_query_param(self.request.build_absolute_uri(), self.page_query_param, self.page_number + 1)

    def get_previous_link(self) -> str | None:
        if self.page_number <= 1:
            return None
        url = self.request.build_absolute_uri()
        if self.page_number == 2:
            return remove_query_param(url, self.page_query_param)
        return replace_query_param(url, self.page_query_param, self.page_number - 1)

    def get_html_context(self) -> dict:
        return {"previous_url": self.get_previous_link(), "next_url": self.get_next_link(), "page_links": []}

    def get_schema_operation_parameters(self, view) -> list[dict]:
        """The page and page size with their bounds, so clients (and the schema fuzzer) know them."""
        return [
            {
                "name": self.page_query_param,
                "required": False,
                "in": "query",
                "description": "A page number within the paginated result set (from 1).",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Items per page, 1 to {self.max_page_size} (default {self.page_size}).",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
        ]

    def get_paginated_response_schema(self, schema: dict) -> dict:
        shape = super().get_paginated_response_schema(schema)
        shape["properties"]["count"]["description"] = (
            f"Items in the list, exact up to {self.count_bound}; longer lists say {self.count_bound} "
            "(follow `next` until it is null)."
        )
        return shape
