import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Stack } from "@ledger/e2e";
import { launchChromium, watchedPage, type Chromium, type WatchedPage } from "@ledger/testing/browser";
import { verifyWebhook } from "@ledger/webhooks";

// The webhook console in headless Chromium against a whole stack and a real HTTPS receiver, driven
// as a user would: by labels and roles (so the page must have them), with the keyboard where it
// matters. Screenshots of each step go to test-output/console/ (gitignored) for a person to look at.
// page.evaluate takes strings here: this project's TypeScript has no DOM types.

let stack: Stack;
let receiver: WebhookReceiver;
let chromium: Chromium;
let watched: WatchedPage;
let page: Page;
let base: string;
const shot = (name: string) => watched.shot(name);

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  stack = await startStack({ notification: { webhookExtraCa: receiver.ca } });
  base = stack.restUrl.replace(/\/v1$/, "");
  chromium = await launchChromium();
  watched = await watchedPage(chromium, base);
  page = watched.page;
}, 60_000);

afterAll(async () => {
  if (watched?.shots.length)
    console.log(`console screenshots (${watched.shots.length}):\n${watched.shots.map((s) => `  ${s}`).join("\n")}`);
  await chromium?.close();
  await stack?.close();
  await receiver?.close();
});

const alert = () => page.getByRole("alert");
const status = () => page.getByRole("status");
const destinations = () => page.getByRole("table", { name: "Destinations" });
const deliveries = () => page.getByRole("table", { name: /^Deliveries to/ });
const events = () => page.getByRole("table", { name: "Events" });

/** Clicks `refresh` until `check` holds: deliveries arrive in the background. */
async function refreshUntil(refresh: string, check: () => Promise<boolean>) {
  await expect
    .poll(
      async () => {
        await page.getByRole("button", { name: refresh }).click();
        await page.waitForTimeout(150);
        return check();
      },
      { timeout: 20_000, interval: 300, message: `after "${refresh}"` },
    )
    .toBe(true);
}

describe("/console in headless Chromium", () => {
  it("manages a destination end to end with the key typed into the page, and shows the API's errors", async () => {
    const entity = (await stack.api.post("/entity", { entity_name: "Wallet", entity_type: "customer" })).body.entity.entity_id as string;

    await page.goto(`${base}/console`);
    await expect(page.title()).resolves.toBe("Ledger console");
    // Nothing but the key form before a key is given.
    expect(await page.getByRole("heading", { name: "Destinations" }).isVisible()).toBe(false);
    await shot("key");
    // The CSP's Trusted Types: an HTML string put into the page is refused by the browser itself.
    expect(
      await page.evaluate(
        `(() => { try { document.body.insertAdjacentHTML("beforeend", "<b>x</b>"); return "allowed"; } catch (e) { return e.name; } })()`,
      ),
    ).toBe("TypeError");
    expect(watched.problems.splice(0)).toEqual(["This document requires 'TrustedHTML' assignment. The action has been blocked."]);

    // A wrong key: the API's 401 is shown, with its code.
    await page.getByLabel("API key").fill("sk_not_a_real_key_0000000000000000");
    await page.getByLabel("API key").press("Enter");
    await alert().filter({ hasText: "unauthenticated" }).waitFor();
    await page.getByRole("button", { name: "Forget key" }).click();

    // The key, typed and submitted with the keyboard.
    await page.getByLabel("API key").fill(stack.account.api_key);
    await page.getByLabel("API key").press("Enter");
    await page.getByRole("heading", { name: "Destinations" }).waitFor();
    await destinations().getByText("No destinations yet").waitFor();
    await status().filter({ hasText: "Key accepted" }).waitFor();
    // Kept in this tab only: sessionStorage, never localStorage or a cookie.
    expect(await page.evaluate("[localStorage.length, document.cookie, sessionStorage.length]")).toEqual([0, "", 1]);
    expect((await chromium.context.cookies()).length).toBe(0);

    // An invalid URL: the API's 400 is shown with its code and message, and nothing is created.
    await page.getByLabel("URL", { exact: true }).fill("http://example.com/hook");
    await page.getByRole("button", { name: "Create destination" }).click();
    const error = alert().filter({ hasText: "invalid_request" });
    await error.waitFor();
    expect(await error.textContent()).toMatch(/invalid_request.*https/);
    await shot("error-invalid-url");
    expect((await stack.api.get("/webhooks")).body.endpoints).toEqual([]);

    // Create: the secret is shown once, focused, and is the one deliveries are signed with.
    await page.getByLabel("URL", { exact: true }).fill(receiver.endpoint("/console"));
    await page.getByLabel("Name (optional)").fill("Orders <b>&amp;</b>");
    await page.getByRole("button", { name: "Create destination" }).click();
    const secretField = page.getByLabel(/^Signing secret of Orders/);
    await secretField.waitFor();
    const secret = await secretField.inputValue();
    expect(secret).toMatch(/^whsec_/);
    expect(await page.evaluate(`document.activeElement?.closest("section")?.getAttribute("aria-labelledby")`)).toBe("secret-heading");
    await shot("secret-shown-once");
    await page.getByRole("button", { name: "I have saved it" }).click();
    expect(await page.content()).not.toContain(secret);
    // The name is text, never markup.
    expect(await destinations().getByRole("cell", { name: "Orders <b>&amp;</b>", exact: true }).isVisible()).toBe(true);
    expect(await destinations().locator("b").count()).toBe(0);

    // A deposit through REST sends transaction.created; the event log shows it and its delivery summary.
    expect((await stack.api.post("/entity/fund", { entity_id: entity, amount: 2500 })).status).toBe(200);
    await refreshUntil(
      "Refresh events",
      async () =>
        (await events().getByRole("row").filter({ hasText: "transaction.created" }).filter({ hasText: "1 succeeded" }).count()) === 1,
    );
    const [delivery] = receiver.received("/console");
    expect(verifyWebhook<{ type: string }>(delivery!.body, delivery!.headers["x-service-signature"] as string, secret).type).toBe(
      "transaction.created",
    );
    await events()
      .getByRole("button", { name: /^Details of transaction\.created/ })
      .click();
    const detail = page.getByRole("region", { name: /^Event transaction\.created/ });
    await detail.getByText('"amount": 2500').waitFor();
    await shot("events");

    // The destination's deliveries: status, attempts, response status and excerpt.
    await destinations().getByRole("button", { name: "Deliveries of Orders <b>&amp;</b>" }).click();
    const row = deliveries().getByRole("row").filter({ hasText: "transaction.created" });
    await row.first().waitFor();
    expect(await page.evaluate("document.activeElement?.id")).toBe("deliveries-heading");
    // Created, event, status, attempts, HTTP status...
    expect((await row.first().getByRole("cell").allTextContents()).slice(2, 5)).toEqual(["succeeded", "1", "200"]);
    await row.first().getByText("Response").click();
    await row.first().getByText("ok", { exact: true }).waitFor();
    await shot("deliveries");

    // Resend: a second delivery of the same event reaches the receiver.
    await row
      .first()
      .getByRole("button", { name: /^Resend/ })
      .click();
    await status()
      .filter({ hasText: /Resent as whd_/ })
      .waitFor();
    await refreshUntil(
      "Refresh deliveries",
      async () => (await row.count()) === 2 && (await row.filter({ hasText: "succeeded" }).count()) === 2,
    );
    expect(receiver.received("/console").length).toBe(2);
    await shot("resent");

    // Disable, then enable again, with the keyboard: focus stays on the button as the row is redrawn.
    await destinations().getByRole("button", { name: "Disable Orders <b>&amp;</b>" }).press("Enter");
    await destinations().getByRole("button", { name: "Enable Orders <b>&amp;</b>" }).waitFor();
    expect((await stack.api.get("/webhooks")).body.endpoints[0].enabled).toBe(false);
    expect(await page.evaluate(`document.activeElement?.getAttribute("aria-label")`)).toBe("Enable Orders <b>&amp;</b>");
    await page.keyboard.press("Space");
    await destinations().getByRole("button", { name: "Disable Orders <b>&amp;</b>" }).waitFor();
    expect((await stack.api.get("/webhooks")).body.endpoints[0].enabled).toBe(true);

    // A reload keeps the key (same tab) and shows the same destinations without asking again.
    await page.reload();
    await destinations().getByRole("cell", { name: "Orders <b>&amp;</b>", exact: true }).waitFor();

    // Roll: a dialog asks how long the old secret stays valid; the new one is shown once.
    await destinations().getByRole("button", { name: "Roll secret of Orders <b>&amp;</b>" }).click();
    const dialog = page.getByRole("dialog");
    await dialog.getByLabel("Previous secret stays valid for").selectOption({ label: "1 hour" });
    await shot("roll-dialog");
    await dialog.getByRole("button", { name: "Roll secret" }).click();
    await status().filter({ hasText: "The previous secret stays valid for 1 hour" }).waitFor();
    const rolled = await page.getByLabel(/^Signing secret of Orders/).inputValue();
    expect(rolled).toMatch(/^whsec_/);
    expect(rolled).not.toBe(secret);
    await shot("rolled");
    await page.getByRole("button", { name: "I have saved it" }).click();

    // Delete, after a confirmation.
    page.once("dialog", (d) => void d.accept());
    await destinations().getByRole("button", { name: "Delete Orders <b>&amp;</b>" }).click();
    await status().filter({ hasText: "Deleted Orders" }).waitFor();
    await destinations().getByText("No destinations yet").waitFor();
    expect((await stack.api.get("/webhooks")).body.endpoints).toEqual([]);
    expect(await destinations().getByRole("row").filter({ hasText: "Orders" }).count()).toBe(0);
    await shot("deleted");

    expect(watched.outside).toEqual([]);
    expect(watched.problems).toEqual([]);
  }, 120_000);
});
