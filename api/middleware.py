"""Django answers some errors before any view runs (an unknown route, a body over
DATA_UPLOAD_MAX_MEMORY_SIZE, a method on a bare Django view) with an HTML page, and in
DEBUG it ignores handler404. Clients of an API want JSON: this turns every such 4xx
outside the admin into Relay's error format, with the codes of api.errors."""
from django.http import JsonResponse

from api.errors import MESSAGES, error_body

# Pages for people, which keep their own HTML: the admin, and the pages the links in
# activation and recovery mails open (their 400 and 410 say what went wrong, in words).
HTML_PREFIXES = ("/admin/", "/activate/", "/recover/")


class JsonErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (400 <= response.status_code < 500 and not request.path.startswith(HTML_PREFIXES)
                and not response.get("Content-Type", "").startswith("application/json")):
            message = MESSAGES.get(response.status_code, "The request could not be handled.")
            return JsonResponse(error_body(response.status_code, message), status=response.status_code)
        return response
