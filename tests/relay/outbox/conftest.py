import pytest


@pytest.fixture
def sending_worker(processes, sink):
    """A mailer and a worker sending through the SMTP sink."""
    processes.env["EMAIL_URL"] = f"smtp://127.0.0.1:{sink[1]}"
    processes.worker("sender")
    processes.mailer("mailer")
    processes.wait_ready()
    return processes
