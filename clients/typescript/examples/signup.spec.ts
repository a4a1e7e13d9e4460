// A Playwright spec as a site's own suite would write it: sign up with a fresh Relay address,
// read the confirmation code from the mail, type it in. `tsc --noEmit` checks it in Relay's
// suite; run it against your site with `npx playwright test`.
import { expect, test } from "relay-client/playwright";

test("a new user confirms their email with the mailed code", async ({ page, relayMailbox }) => {
  await page.goto("https://app.example.com/sign-up");
  await page.getByLabel("Email").fill(relayMailbox.address);
  await page.getByRole("button", { name: "Create account" }).click();

  const code = await relayMailbox.waitForCode({ timeoutSeconds: 60, subject: "Confirm" });
  await page.getByLabel("Code").fill(code);
  await page.getByRole("button", { name: "Confirm" }).click();
  await expect(page.getByText("Welcome")).toBeVisible();

  const [mail] = await relayMailbox.listMessages();
  const checks = await relayMailbox.relay.checkMessage(relayMailbox.id, mail.id, { checks: ["html", "headers"] });
  expect(checks.html && "score" in checks.html ? checks.html.score?.overall : 0).toBeGreaterThan(0.8);
});
