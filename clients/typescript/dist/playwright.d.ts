/**
 * Playwright's `test` with a `relayMailbox` fixture: a fresh mailbox for each test, deleted
 * after it, passing or failing; and `relaySandbox`, the same for a sandbox that catches what
 * the app under test submits with its SMTP settings. The client comes from RELAY_URL and
 * RELAY_API_KEY.
 *
 *   import { test, expect } from "relay-client/playwright";
 *   test("sign-up", async ({ page, relayMailbox }) => { ... await relayMailbox.waitForCode() ... });
 */
import { expect } from "@playwright/test";
import { Relay, type BoundMailbox, type BoundSandbox } from "./index.js";
export interface RelayFixtures {
    relay: Relay;
    relayMailbox: BoundMailbox;
    relaySandbox: BoundSandbox;
}
export declare const test: import("@playwright/test").TestType<import("@playwright/test").PlaywrightTestArgs & import("@playwright/test").PlaywrightTestOptions & RelayFixtures, import("@playwright/test").PlaywrightWorkerArgs & import("@playwright/test").PlaywrightWorkerOptions>;
export { expect };
export type { BoundMailbox, BoundSandbox };
