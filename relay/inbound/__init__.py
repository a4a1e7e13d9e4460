"""Mail in: the SMTP server (server.py), storing what it accepts (storing.py), reading
a message (parsing.py) and what a client wants out of it (extraction.py)."""
