"""What the message checks cost (docs/checks.md): the HTML check of each mail of the suite's
corpus and of a 5 MB HTML mail, against lxml's parse alone of the same HTML (the floor of
any check that reads the document); and a check of 50 links on a loopback site, against
the same 50 HEAD requests one after another with requests.

    scripts/bench.sh checks [--rounds 20]
"""
import argparse
import statistics
import time

from bench.common import command_line, record, setup_django


def timed(function, rounds: int) -> float:
    """The median of `rounds` runs, in ms."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def five_megabytes() -> bytes:
    from tests import mail_corpus

    row = ('<tr><td style="padding:4px;color:#333;font-family:Arial" class="c{0}"><a href="https://shop.example/{0}" '
           'style="display:flex">item {0}</a><img src="https://cdn.example/{0}.png"></td></tr>')
    html = "<table>" + "".join(row.format(index % 500) for index in range(36_000)) + "</table>"
    return mail_corpus.mail("box@relay.localhost", "Big", "plain", html=html)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    setup_django()
    from django.conf import settings
    import lxml.html
    import requests

    from checks.html_support import html_report
    from checks.links import links_check_urls
    from mailboxes.mail_format import whole_html
    from tests import mail_corpus
    from tests.link_site import Site

    corpus = {name: build("box@relay.localhost") for name, build in mail_corpus.REAL_WORLD.items()}
    corpus["5 MB"] = five_megabytes()
    html_rows = []
    for name, raw in corpus.items():
        html = whole_html(raw)
        rounds = max(3, args.rounds // 5) if len(raw) > 1_000_000 else args.rounds
        check = timed(lambda: html_report(whole_html(raw)), rounds)
        floor = timed(lambda: lxml.html.document_fromstring(html) if html.strip() else None, rounds)
        html_rows.append(f"{name} ({len(raw) // 1024} KB): {check:.2f} ms (lxml alone {floor:.2f} ms)")
        print(html_rows[-1])

    settings.RELAY_LINK_CHECK_ALLOW_PRIVATE = True
    site = Site()
    try:
        urls = [f"{site.url}/ok?{index}" for index in range(45)] + [f"{site.url}/moved?{index}" for index in range(5)]
        links_check_urls(urls)  # the first connections and imports, out of the figures
        checked = timed(lambda: links_check_urls(urls), max(3, args.rounds // 4))
        session = requests.Session()
        sequential = timed(lambda: [session.head(url, allow_redirects=True, timeout=10) for url in urls],
                           max(3, args.rounds // 4))
    finally:
        site.stop()
    links_row = f"50 links (5 redirected), loopback: {checked:.0f} ms (requests, one after another: {sequential:.0f} ms)"
    print(links_row)
    record("checks", command_line(), "; ".join(html_rows) + "; " + links_row)


if __name__ == "__main__":
    main()
