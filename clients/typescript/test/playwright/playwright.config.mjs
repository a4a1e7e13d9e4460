// The Playwright run of client.test.mjs's fixture test: this folder's specs, one worker, no browser.
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: ".",
  testMatch: "*.spec.mjs",
  workers: 1,
  retries: 0,
  reporter: "list",
  timeout: 60_000,
  // What Playwright leaves behind goes where the caller says, never into the checkout.
  outputDir: process.env.RELAY_FIXTURE_OUTPUT,
});
