// relay-client against a live Relay the suite started (tests/test_client_typescript.py):
// RELAY_URL, RELAY_API_KEY, RELAY_SMTP_PORT and RELAY_SUBMISSION_PORT say where, RELAY_TEST_CA
// is the authority that signed the SMTP server's certificate; no HTTP is mocked, and the
// sandbox's mail is sent by nodemailer.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { appendFileSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import nodemailer from "nodemailer";

import { Relay, RelayError, WaitTimeout, verifyWebhook, withMailbox, withSandbox } from "../dist/index.js";
import { mail, sendMail } from "../test-support/smtp.mjs";

const port = Number(process.env.RELAY_SMTP_PORT);
const relay = new Relay();
const PACKAGE = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

/** nodemailer as an app would set it up from a sandbox's settings: STARTTLS required, AUTH,
 * and the server's certificate verified against the suite's own authority. */
function transportFor(smtp) {
  return nodemailer.createTransport({
    host: smtp.host, port: smtp.port, secure: false, requireTLS: true, auth: { user: smtp.username, pass: smtp.password },
    tls: { ca: readFileSync(process.env.RELAY_TEST_CA) }, connectionTimeout: 20_000, greetingTimeout: 20_000,
    socketTimeout: 30_000,
  });
}

test("a code sent over SMTP during waitForCode is found", async () => {
  const box = await relay.createMailbox({ ttlMinutes: 10, tags: ["ts"] });
  assert.match(box.address, /@/);
  const started = Date.now();
  setTimeout(() => sendMail({ port, to: box.address, raw: mail({ to: box.address, subject: "Verify",
    text: "Your code is 482913." }) }), 1000);
  assert.equal(await relay.waitForCode(box.id, { timeoutSeconds: 20 }), "482913");
  assert.ok(Date.now() - started < 15_000, "woken by the mail, not by the end of the wait");
});

test("a message reads whole, its raw bytes as sent, and the stream resumes after an event", async () => {
  const box = await relay.createMailbox();
  const raw = mail({ to: box.address, subject: "Raw", text: "Bytes as sent: ünïcödé" });
  await sendMail({ port, to: box.address, raw });
  const message = await relay.waitForMessage(box.id, { timeoutSeconds: 10 });
  assert.ok(message);
  assert.equal(message.subject, "Raw");
  assert.equal((await relay.getMessage(box.id, message.id)).text.trim(), "Bytes as sent: ünïcödé");
  const bytes = await relay.getRaw(box.id, message.id);
  assert.equal(new TextDecoder().decode(bytes), raw.replace(/\r?\n/g, "\r\n"));

  const controller = new AbortController();
  // "0": from the mailbox's first message (a stream otherwise starts with what comes next).
  const stream = relay.events(box.id, { lastEventId: "0", signal: controller.signal });
  const first = (await stream.next()).value;
  assert.equal(first.event, "message");
  assert.equal(first.data.id, message.id);
  controller.abort();
  await assert.rejects(stream.next());

  await sendMail({ port, to: box.address, raw: mail({ to: box.address, subject: "Second", text: "two" }) });
  const resumed = relay.events(box.id, { lastEventId: first.id });
  const next = (await resumed.next()).value;
  assert.equal(next.event, "message");
  assert.equal(next.data.subject, "Second", "resumed after the event seen, not from the start");
  await resumed.return();
});

test("a mailbox is renewed and deleted, then not found", async () => {
  const box = await relay.createMailbox({ ttlMinutes: 10 });
  const renewed = await relay.renewMailbox(box.id, { ttlMinutes: 30 });
  assert.ok(new Date(renewed.expires_at) > new Date(box.expires_at));
  assert.equal(await relay.deleteMailbox(box.id), true);
  await assert.rejects(relay.getMailbox(box.id), error => error instanceof RelayError && error.status === 404
    && error.code === "not_found");
});

test("a lifetime refused is said in the minutes the caller gave", async () => {
  await assert.rejects(relay.createMailbox({ ttlMinutes: 1 }), error => error instanceof RelayError
    && Object.keys(error.fields).join() === "ttl_minutes" && !error.message.includes("ttl_ms")
    && error.message.includes("ttl_minutes: Ensure this value is greater than or equal to 5 minutes."));
  const box = await relay.createMailbox({ ttlMinutes: 10 });
  await assert.rejects(relay.renewMailbox(box.id, { ttlMinutes: 2000 }), error => error instanceof RelayError
    && error.code === "invalid_request" && error.message.includes("between 5 and 1440 minutes on the pro plan"));
  await relay.deleteMailbox(box.id);
});

test("a mail sent with an attachment is queued and kept in the mailbox", async () => {
  const box = await relay.createMailbox();
  const sent = await relay.sendMessage(box.id, { to: ["someone@example.com"], subject: "Report", text: "Attached.",
    attachments: [{ filename: "report.csv", contentType: "text/csv", content: "a,b\n1,2\n" }] });
  assert.equal(sent.status, "queued");
  const kept = await relay.getMessage(box.id, sent.message_id);
  assert.equal(kept.direction, "out");
  assert.deepEqual(kept.attachments.map(item => item.filename), ["report.csv"]);
  const bytes = await relay.getAttachment(box.id, kept.id, kept.attachments[0].id);
  assert.equal(new TextDecoder().decode(bytes), "a,b\n1,2\n");
});

test("waitForDelivery ends when every recipient is final, and the suppression list starts empty", async () => {
  const box = await relay.createMailbox();
  const sent = await relay.sendMessage(box.id, { to: ["ana@example.com"], cc: ["bo@example.com"], subject: "Hi",
    text: "Hello." });
  const waited = await relay.waitForDelivery(box.id, sent.message_id, { timeoutSeconds: 30 });
  assert.equal(waited.final, true);
  assert.deepEqual(waited.delivery.map(row => [row.recipient, row.status, row.smtp_code]),
    [["ana@example.com", "sent", 250], ["bo@example.com", "sent", 250]]);
  assert.deepEqual(await relay.listSuppressions(), []);
  await assert.rejects(relay.deleteSuppression("ana@example.com"), error => error instanceof RelayError
    && error.status === 404);
});

test("a bad key is a RelayError 401", async () => {
  const stranger = new Relay({ apiKey: "rk_not_a_key" });
  await assert.rejects(stranger.listMailboxes(), error => error instanceof RelayError && error.status === 401
    && error.code === "unauthorized");
});

test("a short waitForCode rejects with WaitTimeout", async () => {
  const box = await relay.createMailbox();
  await assert.rejects(relay.waitForCode(box.id, { timeoutSeconds: 1, subject: "never" }),
    error => error instanceof WaitTimeout && error.message.includes('subject "never"'));
});

test("an abort ends a held wait at once", async () => {
  const box = await relay.createMailbox();
  const controller = new AbortController();
  const started = Date.now();
  setTimeout(() => controller.abort(), 300);
  await assert.rejects(relay.waitForMessage(box.id, { timeoutSeconds: 30, signal: controller.signal }),
    error => error.name === "AbortError");
  assert.ok(Date.now() - started < 5000);
});

test("a 429 is retried after its Retry-After, and is a RelayError without retries", async () => {
  // The web process allows 3 open waits per account (RELAY_MAX_OPEN_WAITS=3); this test's
  // account is its own, so no other test's wait or stream takes a place.
  const busy = new Relay({ apiKey: process.env.RELAY_BUSY_API_KEY });
  const box = await busy.createMailbox();
  const holding = [1, 2, 3].map(() => busy.waitForMessage(box.id, { timeoutSeconds: 4 }));
  await new Promise(resolve => setTimeout(resolve, 1000));
  const impatient = new Relay({ apiKey: process.env.RELAY_BUSY_API_KEY, retries: 0 });
  await assert.rejects(impatient.waitForMessage(box.id, { timeoutSeconds: 1 }),
    error => error instanceof RelayError && error.status === 429 && error.code === "rate_limited");
  const started = Date.now();
  assert.equal(await busy.waitForMessage(box.id, { timeoutSeconds: 1 }), null);
  // Relay's Retry-After for open waits is 5 s: the client slept it, then the wait got its place.
  assert.ok(Date.now() - started >= 4500, "waited for the Retry-After before asking again");
  assert.deepEqual(await Promise.all(holding), [null, null, null]);
});

test("withMailbox deletes its mailbox after a failure too", async () => {
  let id;
  await assert.rejects(withMailbox(async mailbox => {
    id = mailbox.id;
    assert.ok(mailbox.expiresAt instanceof Date);
    throw new Error("the test failed");
  }), /the test failed/);
  await assert.rejects(relay.getMailbox(id), error => error instanceof RelayError && error.status === 404);
});

test("a webhook signed by Relay verifies, and a changed body does not", () => {
  const sample = JSON.parse(process.env.RELAY_TEST_WEBHOOK);
  assert.equal(verifyWebhook(sample.body, sample.headers, sample.secret), true);
  assert.equal(verifyWebhook(sample.body + " ", sample.headers, sample.secret), false);
  assert.equal(verifyWebhook(sample.body, sample.headers, "whsec_" + Buffer.from("other").toString("base64")), false);
});

test("nodemailer submits to a sandbox over STARTTLS with AUTH, and a Bcc is found by rcpt in the envelope", async () => {
  const sandbox = await relay.createSandbox({ ttlMinutes: 10 });
  assert.equal(sandbox.sandbox, true);
  assert.deepEqual([sandbox.smtp.port, sandbox.smtp.username, sandbox.smtp.security],
    [Number(process.env.RELAY_SUBMISSION_PORT), sandbox.address, "starttls"]);
  assert.ok(sandbox.smtp.password.length >= 16);
  const transport = transportFor(sandbox.smtp);
  try {
    // First a mail without the Bcc: a wait that ignored rcpt would find this one.
    await transport.sendMail({ from: "shop@staging.example", to: "alice@customer.example", subject: "Welcome",
      text: "Hello." });
    const info = await transport.sendMail({ from: "shop@staging.example", to: "alice@customer.example",
      cc: "carol@customer.example", bcc: "books@staging.example", subject: "Your receipt", text: "Thanks." });
    assert.match(info.response, /^250 /);
    assert.deepEqual(info.accepted, ["alice@customer.example", "carol@customer.example", "books@staging.example"]);
  } finally {
    transport.close();
  }
  const caught = await relay.waitForMessage(sandbox.id, { rcpt: "Books@Staging.example", timeoutSeconds: 30 });
  assert.ok(caught, "the mail with the Bcc was caught");
  assert.equal(caught.subject, "Your receipt");
  assert.deepEqual(caught.envelope, { mail_from: "shop@staging.example",
    rcpt_to: ["alice@customer.example", "carol@customer.example", "books@staging.example"] });
  assert.ok(!caught.headers.some(([name]) => name.toLowerCase() === "bcc"), "no header shows the Bcc");
  assert.deepEqual((await relay.listMessages(sandbox.id, { rcpt: "books@staging.example" })).map(item => item.id),
    [caught.id]);
  assert.equal((await relay.listMessages(sandbox.id, { rcpt: "alice@customer.example" })).length, 2);
  await relay.deleteMailbox(sandbox.id);
});

test("a fault at rcpt with times 1 fails nodemailer's first send with its 451, and the next goes through", async () => {
  await withSandbox(async sandbox => {
    const rules = await sandbox.setFaults([{ stage: "rcpt", code: 451, match: "*@customer.example", times: 1 }]);
    assert.deepEqual(rules.map(rule => [rule.stage, rule.code, rule.times, rule.remaining]), [["rcpt", 451, 1, 1]]);
    const transport = transportFor(sandbox.smtp);
    const receipt = { from: "shop@staging.example", to: "alice@customer.example", subject: "Receipt", text: "Paid." };
    try {
      await assert.rejects(transport.sendMail(receipt), error => error.responseCode === 451
        && /^451 /.test(error.response));
      const info = await transport.sendMail(receipt);
      assert.match(info.response, /^250 /);
    } finally {
      transport.close();
    }
    assert.deepEqual((await sandbox.getFaults()).map(rule => rule.remaining), [0]);
    const caught = await sandbox.waitForMessage({ timeoutSeconds: 30 });
    assert.equal(caught?.subject, "Receipt");
    assert.equal((await sandbox.listMessages()).length, 1, "the faulted mail was not stored");
    assert.equal(await sandbox.clearFaults(), true);
    assert.deepEqual(await sandbox.getFaults(), []);
  }, { relay, ttlMinutes: 10 });
});

test("a rotated SMTP password signs in and the old one is refused with 535", async () => {
  await withSandbox(async sandbox => {
    const old = sandbox.smtp;
    const fresh = await sandbox.rotateSmtpPassword();
    assert.notEqual(fresh.password, old.password);
    assert.equal(sandbox.smtp.password, fresh.password, "the bound sandbox holds the new settings");
    const message = { from: "app@staging.example", to: "dev@customer.example", subject: "Rotated", text: "ok" };
    const stale = transportFor(old);
    try {
      await assert.rejects(stale.sendMail(message), error => error.responseCode === 535 && error.code === "EAUTH");
    } finally {
      stale.close();
    }
    const current = transportFor(sandbox.smtp);
    try {
      assert.match((await current.sendMail(message)).response, /^250 /);
    } finally {
      current.close();
    }
    assert.equal((await sandbox.waitForMessage({ rcpt: "dev@customer.example", timeoutSeconds: 30 }))?.subject,
      "Rotated");
  }, { relay });
});

test("a catch nodemailer submitted is released (202) to the one address named, and a sent copy is refused with 409",
  async () => {
    // The client over the platform's fetch, each answer's status seen on its way back.
    const answers = [];
    const watched = new Relay({ fetch: async (url, init) => {
      const response = await fetch(url, init);
      answers.push([init.method, new URL(url).pathname, response.status]);
      return response;
    } });
    await withSandbox(async sandbox => {
      const transport = transportFor(sandbox.smtp);
      try {
        await transport.sendMail({ from: "shop@staging.example", to: "alice@customer.example",
          cc: "carol@customer.example", bcc: "books@staging.example", subject: "Your order shipped",
          text: "It is on its way." });
      } finally {
        transport.close();
      }
      const caught = await sandbox.waitForMessage({ rcpt: "books@staging.example", timeoutSeconds: 30 });
      assert.ok(caught, "the app's mail was caught");

      const sent = await sandbox.release(caught.id, "qa-release@team.example");
      assert.deepEqual(Object.keys(sent).sort(), ["id", "message_id", "status"]);
      assert.equal(sent.status, "queued");
      assert.deepEqual(answers.filter(([method]) => method === "POST").at(-1),
        ["POST", `/api/v1/mailboxes/${sandbox.id}/messages/${caught.id}/release`, 202]);

      // Through the outbox's worker and mailer to the SMTP next hop: the named address, no other.
      const waited = await watched.waitForDelivery(sandbox.id, sent.message_id, { timeoutSeconds: 60 });
      assert.equal(waited.final, true);
      assert.deepEqual(waited.delivery.map(row => [row.recipient, row.status, row.smtp_code]),
        [["qa-release@team.example", "sent", 250]]);
      const copy = await sandbox.getMessage(sent.message_id);
      assert.deepEqual([copy.direction, copy.subject, copy.thread_id], ["out", "Your order shipped", caught.thread_id]);
      // What the next hop should have: the caught bytes behind the Resent-* block (the caller checks).
      appendFileSync(process.env.RELAY_RELEASE_RECORD, JSON.stringify({ to: "qa-release@team.example",
        from: sandbox.address, raw: Buffer.from(await sandbox.relay.getRaw(sandbox.id, caught.id)).toString("base64") })
        + "\n");

      await assert.rejects(watched.releaseMessage(sandbox.id, sent.message_id, ["qa-release@team.example"]),
        error => error instanceof RelayError && error.status === 409 && error.code === "conflict");
      assert.equal(answers.at(-1)[2], 409);
    }, { relay: watched, ttlMinutes: 10 });
  });

test("an anonymous sandbox's token cannot release its catch: a RelayError 403", async () => {
  const anonymous = new Relay({ apiKey: "" }); // no key: the sandbox comes with a token of its own
  const sandbox = await anonymous.createSandbox();
  assert.ok(sandbox.token);
  const transport = transportFor(sandbox.smtp);
  try {
    await transport.sendMail({ from: "shop@staging.example", to: "alice@customer.example", subject: "Hi", text: "x" });
  } finally {
    transport.close();
  }
  const holder = new Relay({ apiKey: sandbox.token });
  const caught = await holder.waitForMessage(sandbox.id, { timeoutSeconds: 30 });
  assert.ok(caught);
  await assert.rejects(holder.releaseMessage(sandbox.id, caught.id, "qa@team.example"),
    error => error instanceof RelayError && error.status === 403 && error.code === "forbidden");
  await holder.deleteMailbox(sandbox.id);
});

test("faults are refused on a mailbox that is not a sandbox", async () => {
  const box = await relay.createMailbox();
  await assert.rejects(relay.setFaults(box.id, [{ stage: "rcpt", code: 451 }]), error => error instanceof RelayError
    && error.status >= 400 && error.status < 500);
  await relay.deleteMailbox(box.id);
});

test("Playwright's relaySandbox is a fresh sandbox for each test, deleted after it, passing or failing", async () => {
  const folder = mkdtempSync(path.join(tmpdir(), "relay-fixture-"));
  const record = path.join(folder, "sandboxes.jsonl");
  const run = promisify(execFile);
  const { stdout } = await run(process.execPath, [path.join(PACKAGE, "node_modules", "@playwright", "test", "cli.js"),
    "test", "--config", path.join(PACKAGE, "test", "playwright", "playwright.config.mjs")], {
    cwd: PACKAGE, env: { ...process.env, RELAY_FIXTURE_RECORD: record, RELAY_FIXTURE_OUTPUT: path.join(folder, "results"),
      CI: "1" }, timeout: 120_000,
  });
  assert.match(stdout, /2 passed/, stdout);
  const seen = readFileSync(record, "utf8").trim().split("\n").map(line => JSON.parse(line));
  assert.equal(seen.length, 2);
  assert.notEqual(seen[0].id, seen[1].id, "a sandbox of its own for each test");
  for (const { id } of seen) {
    await assert.rejects(relay.getMailbox(id), error => error instanceof RelayError && error.status === 404);
  }
});
