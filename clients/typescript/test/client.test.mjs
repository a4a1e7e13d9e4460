// relay-client against a live Relay the suite started (tests/test_client_typescript.py):
// RELAY_URL, RELAY_API_KEY and RELAY_SMTP_PORT say where; no HTTP is mocked.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Relay, RelayError, WaitTimeout, verifyWebhook, withMailbox } from "../dist/index.js";
import { mail, sendMail } from "../test-support/smtp.mjs";

const port = Number(process.env.RELAY_SMTP_PORT);
const relay = new Relay();

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
