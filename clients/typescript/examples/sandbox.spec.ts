// A Playwright spec as a team's own suite would write it for mail its app sends to anyone:
// point the staging app's SMTP at a fresh sandbox, place an order, and read the receipt the
// app sent to the customer, with the accounts team in Bcc. `tsc --noEmit` checks it in
// Relay's suite; run it against your app with `npx playwright test`.
import { expect, test } from "relay-client/playwright";

test("an order mails a receipt to the customer, with accounts in Bcc", async ({ page, request, relaySandbox }) => {
  // The staging app takes its SMTP settings from a test-only route of its own.
  const { host, port, username, password } = relaySandbox.smtp;
  await request.put("https://staging.example.com/test/smtp", { data: { host, port, username, password } });

  await page.goto("https://staging.example.com/checkout");
  await page.getByLabel("Email").fill("alice@customer.example");
  await page.getByRole("button", { name: "Pay" }).click();

  const receipt = await relaySandbox.waitForMessage({ rcpt: "books@staging.example", timeoutSeconds: 60 });
  expect(receipt?.subject).toContain("Receipt");
  expect(receipt?.envelope.rcpt_to).toEqual(["alice@customer.example", "books@staging.example"]);
});

test("a refused recipient is retried by the app", async ({ page, relaySandbox }) => {
  // The first RCPT TO to a customer is answered 451 (a greylisting server, say); the app retries.
  await relaySandbox.setFaults([{ stage: "rcpt", code: 451, match: "*@customer.example", times: 1 }]);
  await page.goto("https://staging.example.com/checkout");
  await page.getByLabel("Email").fill("bo@customer.example");
  await page.getByRole("button", { name: "Pay" }).click();

  const receipt = await relaySandbox.waitForMessage({ rcpt: "bo@customer.example", timeoutSeconds: 120 });
  expect(receipt).not.toBeNull();
  expect((await relaySandbox.getFaults())[0].remaining).toBe(0);
});
