"""DATA read a chunk at a time (relay/inbound/server.py, RelaySMTP._message_read): the
message whatever pieces it arrives in, its dots unstuffed, and what the client sent after
the ending dot left for the commands that follow. On a raw socket, so the pieces are ours."""
import socket

from mailboxes.models import Message
from tests.helpers import create_via_api


def box_address(client) -> str:
    response = create_via_api(client, ttl_ms=600_000)
    assert response.status_code == 201
    return response.json()["address"]


class Wire:
    """One SMTP session on a socket: send bytes as they are, read whole replies."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.pending = b""
        assert self.reply().startswith(b"220")

    def reply(self) -> bytes:
        while b"\r\n" not in self.pending:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\r\n", 1)
        return line if line[3:4] != b"-" else self.reply()

    def close(self) -> None:
        self.sock.close()


def test_a_message_in_small_pieces_is_stored_byte_exact_with_its_dots_unstuffed(smtp_server, client_pro):
    address = box_address(client_pro)
    body = b".first line\r\nSubject: dots\r\n\r\n.leading dot\r\n..two dots\r\nmiddle\r\n...\r\n. \r\nlast\r\n"
    # As a client sends it (RFC 5321 4.5.2): each line that starts with a dot gets one more.
    stuffed = b"".join(b"." + line if line.startswith(b".") else line for line in body.splitlines(keepends=True))
    wire = Wire(smtp_server.port)
    for command in (b"EHLO test\r\n", b"MAIL FROM:<a@example.com>\r\n", f"RCPT TO:<{address}>\r\n".encode(),
                    b"DATA\r\n"):
        wire.sock.sendall(command)
        assert wire.reply()[:3] in (b"250", b"354")
    # Three bytes at a time: the ending "\r\n.\r\n" and every "\r\n." fall across reads.
    for start in range(0, len(stuffed + b".\r\n"), 3):
        wire.sock.sendall((stuffed + b".\r\n")[start:start + 3])
    assert wire.reply().startswith(b"250")
    wire.close()
    assert bytes(Message.objects.get(envelope_to=address).content.raw) == body


def test_commands_sent_right_after_the_ending_dot_are_answered_in_order(smtp_server, client_pro):
    address = box_address(client_pro)
    wire = Wire(smtp_server.port)
    wire.sock.sendall(b"EHLO test\r\n")
    assert wire.reply().startswith(b"250")
    for number in range(3):
        wire.sock.sendall(f"MAIL FROM:<a@example.com>\r\nRCPT TO:<{address}>\r\nDATA\r\n".encode())
        assert [wire.reply()[:3] for _ in range(3)] == [b"250", b"250", b"354"]
        # The message, its ending dot and the next command in one write.
        following = b"QUIT\r\n" if number == 2 else b"NOOP\r\n"
        wire.sock.sendall(f"Subject: {number}\r\n\r\nbody {number}\r\n.\r\n".encode() + following)
        assert [wire.reply()[:3] for _ in range(2)] == [b"250", b"221" if number == 2 else b"250"]
    wire.close()
    assert sorted(Message.objects.filter(envelope_to=address).values_list("subject", flat=True)) == ["0", "1", "2"]


def test_an_empty_message_is_taken_and_a_long_line_in_pieces_is_500(smtp_server, client_pro):
    address = box_address(client_pro)
    wire = Wire(smtp_server.port)
    wire.sock.sendall(b"EHLO test\r\n")
    assert wire.reply().startswith(b"250")
    wire.sock.sendall(f"MAIL FROM:<a@example.com>\r\nRCPT TO:<{address}>\r\nDATA\r\n".encode())
    assert [wire.reply()[:3] for _ in range(3)] == [b"250", b"250", b"354"]
    wire.sock.sendall(b".\r\n")
    assert wire.reply()[:3] == b"250"
    wire.sock.sendall(f"MAIL FROM:<a@example.com>\r\nRCPT TO:<{address}>\r\nDATA\r\n".encode())
    assert [wire.reply()[:3] for _ in range(3)] == [b"250", b"250", b"354"]
    line = b"Subject: long\r\n\r\n" + b"y" * 5_000 + b"\r\n.\r\n"
    for start in range(0, len(line), 700):
        wire.sock.sendall(line[start:start + 700])
    assert wire.reply()[:3] == b"500"
    wire.sock.sendall(b"NOOP\r\n")
    assert wire.reply()[:3] == b"250"
    wire.close()
    assert Message.objects.filter(envelope_to=address).count() == 1
