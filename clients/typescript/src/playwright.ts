/**
 * Playwright's `test` with a `relayMailbox` fixture: a fresh mailbox for each test, deleted
 * after it, passing or failing; and `relaySandbox`, the same for a sandbox that catches what
 * the app under test submits with its SMTP settings. The client comes from RELAY_URL and
 * RELAY_API_KEY.
 *
 *   import { test, expect } from "relay-client/playwright";
 *   test("sign-up", async ({ page, relayMailbox }) => { ... await relayMailbox.waitForCode() ... });
 */
import { expect, test as base } from "@playwright/test";

import { bind, bindSandbox, deletedAfter, Relay, type BoundMailbox, type BoundSandbox } from "./index.js";

export interface RelayFixtures {
  relay: Relay;
  relayMailbox: BoundMailbox;
  relaySandbox: BoundSandbox;
}

export const test = base.extend<RelayFixtures>({
  // eslint-disable-next-line no-empty-pattern
  relay: async ({}, use) => {
    await use(new Relay());
  },
  relayMailbox: async ({ relay }, use) => {
    await deletedAfter(bind(relay, await relay.createMailbox()), use);
  },
  relaySandbox: async ({ relay }, use) => {
    await deletedAfter(bindSandbox(relay, await relay.createSandbox()), use);
  },
});

export { expect };
export type { BoundMailbox, BoundSandbox };
