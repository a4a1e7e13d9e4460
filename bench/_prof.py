import time
from bench.common import fresh_database, setup_django
fresh_database(); setup_django()
from accounts.services import account_create_with_key
from mailboxes.keys import Caller
from relay.provisioning import mailbox_create
import relay.smtp as smtp
from bench.smtp_ingest import message
owner, _ = account_create_with_key(login="bench", plan="pro")
addrs = [mailbox_create(caller=Caller(owner=owner), local_part=None, domain=None, ttl_ms=3_600_000)[0].address for _ in range(50)]
raw = message(addrs[0], 1)
N=1000
r=[smtp.recipient_mailbox(a) for a in addrs]
for rnd in range(3):
    t=time.perf_counter(); c=time.process_time()
    for i in range(N): smtp.deliver_message(raw=raw, mail_from="a@b.c", recipients=[r[i%50]])
    print("deliver wall ms", round((time.perf_counter()-t)/N*1000,3), "cpu ms", round((time.process_time()-c)/N*1000,3))
