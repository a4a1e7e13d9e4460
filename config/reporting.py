"""What an error page or an error report may show: Django's own filter for settings and
request data (it hides names like KEY, SECRET, TOKEN, PASS), and no frame's local
variables at all. A view or a service may hold a secret in a local under any name (a
domain's private key while signing, a token while checking it); Django hides those only
where each function is marked, and one unmarked function would show it."""
from django.views.debug import SafeExceptionReporterFilter


class NoLocalsFilter(SafeExceptionReporterFilter):
    def get_traceback_frame_variables(self, request, tb_frame):
        return [("(local variables)", "hidden (config/reporting.py)")] if tb_frame.f_locals else []
