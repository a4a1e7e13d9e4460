/**
 * Playwright's `test` with a `relayMailbox` fixture: a fresh mailbox for each test, deleted
 * after it, passing or failing. The client comes from RELAY_URL and RELAY_API_KEY.
 *
 *   import { test, expect } from "relay-client/playwright";
 *   test("sign-up", async ({ page, relayMailbox }) => { ... await relayMailbox.waitForCode() ... });
 */
import { expect, test as base } from "@playwright/test";
import { bind, Relay } from "./index.js";
export const test = base.extend({
    // eslint-disable-next-line no-empty-pattern
    relay: async ({}, use) => {
        await use(new Relay());
    },
    relayMailbox: async ({ relay }, use) => {
        const mailbox = bind(relay, await relay.createMailbox());
        try {
            await use(mailbox);
        }
        finally {
            await mailbox.delete();
        }
    },
});
export { expect };
