"""Codes and links (docs/api.md) over a corpus of real-shaped mails, parsed the way ingest
parses them, and shown on message detail."""
import pytest

from mailboxes.mail_format import text_of_html
from relay.ingest import find_codes, find_links
from mailboxes.mail_format import parse_message
from tests import mail_corpus as corpus
from tests.helpers import create_via_api, deliver


def mail(subject: str, body: str, *, html: str = "", encoding: str = "8bit") -> bytes:
    """A mail as senders write them: plain, HTML-only, or both; 8bit, quoted-printable or base64."""
    return corpus.mail("box@relay.localhost", subject, body, sender="Acme <no-reply@acme.example>",
                       html=html or None, cte=encoding)


CORPUS = {
    "sign-up": (mail("Confirm your Acme account",
                     "Welcome to Acme!\r\n\r\nYour verification code is 482913.\r\n\r\n"
                     "Or confirm here: https://acme.example/confirm?t=abc123\r\n\r\nCall us at +1 (555) 010-2030.\r\n"
                     "(c) 2025 Acme Inc.\r\n"),
                "482913", ["https://acme.example/confirm?t=abc123"]),
    "otp": (mail("Your one-time passcode", "Use 7301 to log in. It expires in 10 minutes.\r\n"),
            "7301", []),
    "magic-link": (mail("Sign in to Acme", "",
                        html='<p>Click <a href="https://acme.example/magic?token=Zx9&amp;u=1">Sign in</a> to continue.</p>'
                             '<p>Sent on 12/03/2026.</p>'),
                   None, ["https://acme.example/magic?token=Zx9&u=1"]),
    "password-reset": (mail("Reset your password",
                            "We got a request to reset your password.\r\n"
                            "Reset it: https://acme.example/reset/8f2a\r\nSecurity code: K7Q2M9\r\n",
                            html='<a href="https://acme.example/reset/8f2a">Reset password</a> Security code: <b>K7Q2M9</b>'),
                       "K7Q2M9", ["https://acme.example/reset/8f2a"]),
    "two-factor": (mail("Acme two-factor authentication", "Your 2FA code: 193-847\r\nDo not share it.\r\n"),
                   "193847", []),
    "html-only": (mail("Your login code", "", html="<html><head><style>.x{color:#123456}</style></head><body>"
                                                   "<h1>Login</h1><p>Your code is <strong>905512</strong></p>"
                                                   '<a href="https://acme.example/help">Help</a></body></html>'),
                  "905512", ["https://acme.example/help"]),
    "quoted-printable": (mail("Verify your e-mail", "Hello José,\r\n\r\nYour verification code: 661204\r\n"
                              "Details: https://acme.example/verify?id=" + "x" * 90 + "\r\n", encoding="quoted-printable"),
                         "661204", ["https://acme.example/verify?id=" + "x" * 90]),
    "base64": (mail("Verification", "Bonjour, votre code de vérification est 250781.\r\n", encoding="base64"),
               "250781", []),
    "non-english": (mail("Ihr Bestätigungscode", "Hallo,\r\n\r\nIhr Bestätigungscode lautet 314159.\r\n"
                         "Bei Fragen: Tel. +49 30 1234567, oder am 24.12.2026.\r\n", encoding="quoted-printable"),
                    "314159", []),
    "tracking-redirect": (mail("Confirm your subscription", "",
                               html='<a href="https://click.mail.example/ls/click?upn=abc%3D%3D&amp;r=https%3A%2F%2Facme.example%2Fok">'
                                    'Confirm subscription</a><a href="https://acme.example/unsubscribe">Unsubscribe</a>'),
                          None, ["https://click.mail.example/ls/click?upn=abc%3D%3D&r=https%3A%2F%2Facme.example%2Fok",
                                 "https://acme.example/unsubscribe"]),
    "no-code": (mail("Your receipt", "Thanks for your order #20260 of 2026-11-22. Total $1299. Call 555-123-4567.\r\n"),
                None, []),
}


def extracted(raw: bytes) -> tuple[list[str], list[str]]:
    parsed = parse_message(raw)
    codes = find_codes(parsed.subject, parsed.text or text_of_html(parsed.html))
    return codes, [link["url"] for link in find_links(parsed.text, parsed.html)]


@pytest.mark.parametrize("name", CORPUS)
def test_the_corpus_gives_the_expected_first_code_and_links(name):
    raw, first_code, links = CORPUS[name]
    codes, urls = extracted(raw)
    assert (codes[0] if codes else None) == first_code, codes
    assert urls == links


@pytest.mark.parametrize("text", ["Call +1 415 555 0134 today", "Meeting on 2026-11-22", "Copyright 2024 code inc",
                                  "Invoice code dated 03/04/2025", "Your PIN is in the 1990 letter"])
def test_phone_numbers_dates_and_years_are_not_codes(text):
    assert find_codes("", text) == []


def test_links_keep_their_order_and_appear_once():
    html = '<a href="https://a.example/1">one</a><a href="https://a.example/2">two</a><a href="https://a.example/1">x</a>'
    links = find_links("see https://a.example/2 and https://a.example/3.", html)
    assert links == [{"url": "https://a.example/1", "text": "one"}, {"url": "https://a.example/2", "text": "two"},
                     {"url": "https://a.example/3", "text": "https://a.example/3"}]


def test_message_detail_shows_codes_and_links(client_pro):
    box = create_via_api(client_pro, local_part="codes").json()
    deliver(CORPUS["password-reset"][0], box["address"])
    listed = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages").json()["results"]
    detail = client_pro.get(f"/api/v1/mailboxes/{box['id']}/messages/{listed[0]['id']}").json()
    assert detail["codes"][0] == "K7Q2M9"
    assert detail["links"] == [{"url": "https://acme.example/reset/8f2a", "text": "Reset password"}]


# Verification mails as services send them in the languages their users read, each in
# the shape of that language's mails (its word for "code", its punctuation, digits glued
# to the words of scripts written without spaces). Each is parsed from a real MIME mail,
# base64 as most senders encode non-Latin text.
LANGUAGES = {
    "English": ("Your verification code", "Your verification code is 482913. It expires in 10 minutes."),
    "Spanish": ("Tu código de verificación", "Tu código de verificación es 482913. Caduca en 10 minutos."),
    "Portuguese": ("Seu código de verificação", "Use o código 482913 para confirmar sua conta."),
    "French": ("Votre code de vérification", "Votre code de vérification est : 482913. Il expire dans 10 minutes."),
    "German": ("Ihr Bestätigungscode", "Ihr Bestätigungscode lautet 482913. Er ist 10 Minuten gültig."),
    "Italian": ("Il tuo codice di verifica", "Il tuo codice di verifica è 482913."),
    "Dutch": ("Je verificatiecode", "Je verificatiecode is 482913."),
    "Polish": ("Twój kod weryfikacyjny", "Twój kod weryfikacyjny to 482913."),
    "Russian": ("Код подтверждения", "Ваш код подтверждения: 482913. Никому его не сообщайте."),
    "Ukrainian": ("Код підтвердження", "Ваш код підтвердження: 482913."),
    "Turkish": ("Doğrulama kodunuz", "Doğrulama kodunuz: 482913. Bu kodu kimseyle paylaşmayın."),
    "Japanese": ("認証コードのお知らせ", "認証コードは482913です。10分間有効です。"),
    "Chinese (simplified)": ("验证码", "您的验证码是482913，10分钟内有效。"),
    "Chinese (traditional)": ("驗證碼通知", "您的驗證碼為482913，請於10分鐘內輸入。"),
    "Korean": ("인증 코드", "인증 코드는 482913 입니다"),
    "Korean (SMS style)": ("인증번호 안내", "[서비스] 인증번호 [482913]를 입력해주세요."),
    "Arabic": ("رمز التحقق", "رمز التحقق الخاص بك هو 482913. لا تشاركه مع أحد."),
    "Arabic (Arabic-Indic digits)": ("رمز التحقق", "رمز التحقق: ٤٨٢٩١٣"),
    "Persian": ("کد تایید", "کد تایید شما: 482913"),
    "Hebrew": ("קוד אימות", "קוד האימות שלך הוא 482913"),
    "Hindi": ("सत्यापन कोड", "आपका सत्यापन कोड 482913 है।"),
    "Thai": ("รหัสยืนยัน", "รหัสยืนยันของคุณคือ 482913"),
    "Vietnamese": ("Mã xác minh", "Mã xác minh của bạn là 482913."),
    "Indonesian": ("Kode verifikasi", "Kode verifikasi Anda adalah 482913."),
    "Czech": ("Ověřovací kód", "Váš ověřovací kód je 482913."),
    "Hungarian": ("Ellenőrző kód", "Az ellenőrző kódod: 482913"),
    "Greek": ("Κωδικός επαλήθευσης", "Ο κωδικός επαλήθευσής σας είναι 482913."),
    "Swedish": ("Din verifieringskod", "Din verifieringskod är 482913."),
    "Danish": ("Din bekræftelseskode", "Din bekræftelseskode er 482913."),
    "Finnish": ("Vahvistuskoodi", "Vahvistuskoodisi on 482913."),
    "Romanian": ("Codul de verificare", "Codul tău de verificare este 482913."),
    "Japanese (fullwidth digits)": ("確認コード", "確認コード：４８２９１３"),
}

# Mails in the same languages with numbers and no code: none may yield one.
NO_CODE = {
    "Korean": ("인증 완료", "인증이 완료되었습니다. 고객센터 1588-1234"),
    "Chinese": ("验证成功", "验证成功！客服电话 400-800-1234，订单于2026年11月26日送达。"),
    "Japanese": ("ご注文の確認", "ご注文ありがとうございます。合計 12,800円。お問い合わせは03-1234-5678まで。"),
    "Russian": ("Подтверждение заказа", "Код города 495, телефон +7 495 123-45-67, доставка 24.11.2026."),
    "Arabic": ("تأكيد الطلب", "تم تأكيد طلبك بتاريخ 2026-11-24. للاستفسار اتصل على +966 11 234 5678"),
    "German": ("Bestellbestätigung", "Ihre Bestellung vom 24.11.2026 über 129,99 € ist bestätigt."),
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_verification_mail_in_each_common_language_yields_its_code(language):
    subject, body = LANGUAGES[language]
    parsed = parse_message(mail(subject, body, encoding="base64"))
    assert find_codes(parsed.subject, parsed.text) == ["482913"], language


@pytest.mark.parametrize("language", NO_CODE)
def test_numbers_in_mails_of_those_languages_are_not_codes(language):
    subject, body = NO_CODE[language]
    parsed = parse_message(mail(subject, body, encoding="base64"))
    assert find_codes(parsed.subject, parsed.text) == [], language
