"""What the web process takes before any view runs (config/asgi.py):
a WebSocket upgrade to any path is refused with a 4xx, not a 500; and a body over its
route's limit is a 413 before it is parsed, whether its length is declared or it comes
chunked. Against a real gunicorn with uvicorn workers, as deployed."""
import base64
import json
import socket
from urllib.parse import urlsplit

import pytest
import requests

from accounts.services import account_create_with_key

pytestmark = pytest.mark.workers

THREE_MIB = 3 * 1024 * 1024
# Every route but a send, a reply and /mcp (SECURITY.md, "1 MiB").
BODY_LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def web(module_processes):
    return module_processes.start_web()


def upgrade_status(base: str, path: str) -> tuple[int, bytes]:
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {base64.b64encode(b'relay-test-key-1').decode()}\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split(b" ", 2)[1]), head


@pytest.mark.parametrize("path", ["/", "/api/v1/", "/api/v1/mailboxes", "/mcp", "/admin/", "/no/such/path"])
def test_a_websocket_upgrade_is_refused_with_a_4xx(web, module_processes, path):
    status, head = upgrade_status(web, path)
    assert 400 <= status < 500, head
    assert "Traceback" not in module_processes.log("web")


def test_a_3_mib_create_is_413_before_it_is_parsed(web, transactional_db):
    body = json.dumps({"local_part": "x", "note": "a" * THREE_MIB}).encode()
    answer = requests.post(f"{web}/api/v1/mailboxes", data=body, headers={"Content-Type": "application/json"},
                           timeout=30)
    assert answer.status_code == 413 and answer.json()["code"] == "too_large", answer.text
    assert str(BODY_LIMIT) in answer.json()["message"]

    def chunks():
        for _ in range(THREE_MIB // 65536):
            yield b"a" * 65536

    chunked = requests.post(f"{web}/api/v1/mailboxes", data=chunks(), timeout=30,
                            headers={"Content-Type": "application/json"})
    assert chunked.status_code == 413 and chunked.json()["code"] == "too_large"
    # A body within the route's limit still reaches the view.
    assert requests.post(f"{web}/api/v1/mailboxes", json={"ttl_ms": 600_000}, timeout=10).status_code == 201


def test_a_send_may_still_carry_3_mib_of_attachments(web, transactional_db):
    _, key = account_create_with_key(login="big-sender", plan="pro")
    headers = {"Authorization": f"Bearer {key}"}
    box = requests.post(f"{web}/api/v1/mailboxes", json={"ttl_ms": 600_000}, headers=headers, timeout=10).json()
    attachment = {"filename": "big.bin", "content_type": "application/octet-stream",
                  "content_base64": base64.b64encode(b"x" * (THREE_MIB - 1024)).decode()}
    sent = requests.post(f"{web}/api/v1/mailboxes/{box['id']}/messages", headers=headers, timeout=60,
                         json={"to": ["rcpt@example.com"], "subject": "Big", "text": "hi", "attachments": [attachment]})
    assert sent.status_code == 202, sent.text
