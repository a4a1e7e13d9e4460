// Run by client.test.mjs under Playwright's own runner: the relaySandbox fixture, in a test
// that passes and one that fails. Each records the sandbox it got (RELAY_FIXTURE_RECORD), so
// the caller can see both were deleted afterwards. No browser: no test asks for a page.
import { appendFileSync } from "node:fs";

import { expect, test } from "../../dist/playwright.js";

function record(sandbox) {
  appendFileSync(process.env.RELAY_FIXTURE_RECORD, JSON.stringify({ id: sandbox.id }) + "\n");
}

test("relaySandbox is a sandbox with its SMTP settings", async ({ relaySandbox }) => {
  record(relaySandbox);
  expect(relaySandbox.smtp.username).toBe(relaySandbox.address);
  expect(relaySandbox.smtp.password.length).toBeGreaterThanOrEqual(16);
  expect((await relaySandbox.relay.getMailbox(relaySandbox.id)).sandbox).toBe(true);
});

test("relaySandbox is deleted after a failing test too", async ({ relaySandbox }) => {
  test.fail(); // expected to fail: Playwright counts it as passed when it does
  record(relaySandbox);
  throw new Error("the test failed");
});
