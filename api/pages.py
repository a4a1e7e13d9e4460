"""The pages the links in Relay's mails open (docs/api.md): GET /activate/{token} and
GET /recover/{token}. A GET only shows: mail scanners open every link in a mail, so the
token is used only when the person presses the button, which POSTs to the API."""
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts import services, tokens
from accounts.errors import Gone, InvalidRequest
from accounts.models import TokenAction


def _page(request, action: str, link_token: str, find_login) -> HttpResponse:
    context = {"token": link_token, "action": action}
    try:
        context["login"] = find_login()
    except InvalidRequest as exc:
        return render(request, "api/token_page.html", {**context, "problem": exc.message}, status=400)
    except Gone as exc:
        return render(request, "api/token_page.html", {**context, "problem": exc.message}, status=410)
    return render(request, "api/token_page.html", context)


@require_GET
def activate_page(request, link_token: str) -> HttpResponse:
    def login() -> str:
        return services.activation_token_for_page(link_token=link_token).account.login

    return _page(request, TokenAction.ACTIVATION, link_token, login)


@require_GET
def recover_page(request, link_token: str) -> HttpResponse:
    def login() -> str:
        # A recovery link is signed together with its code, which this page asks for:
        # until then only its shape can be checked, and nothing is looked up.
        tokens.decode(link_token)
        return ""

    return _page(request, TokenAction.KEY_RECOVERY, link_token, login)
