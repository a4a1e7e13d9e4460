"""Django answers some errors before any view runs (an unknown route, a body over
DATA_UPLOAD_MAX_MEMORY_SIZE, a method on a bare Django view) with an HTML page, and in
DEBUG it ignores handler404. Clients of an API want JSON: this turns every such 4xx
outside the admin into Relay's error format."""
from django.http import JsonResponse

ERROR_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "invalid_request", 429: "rate_limited"}


class JsonErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (400 <= response.status_code < 500 and not request.path.startswith("/admin/")
                and not response.get("Content-Type", "").startswith("application/json")):
            code = ERROR_CODES.get(response.status_code, "invalid_request")
            message = "Not found." if response.status_code == 404 else "The request could not be handled."
            return JsonResponse({"code": code, "message": message}, status=response.status_code)
        return response
