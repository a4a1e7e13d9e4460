-- POST /api/v1/mailboxes with a JSON body; the key comes from the RELAY_KEY environment variable.
wrk.method = "POST"
wrk.body = '{"ttl_ms": 600000}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("RELAY_KEY")
