import { readFileSync } from "node:fs";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Stack } from "@ledger/e2e";
import { launchChromium, watchedPage, type Chromium, type WatchedPage } from "@ledger/testing/browser";

// The console's ledger view in headless Chromium against a whole stack: money is made through the
// API first, then the page is driven as a user would, by labels and roles, and what it shows is
// checked against what the API answers. Screenshots go where console-browser.test.ts puts its own.
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
  watched = await watchedPage(chromium, base, "ledger-");
  page = watched.page;
}, 60_000);

afterAll(async () => {
  await chromium?.close();
  await stack?.close();
  await receiver?.close();
});

const status = () => page.getByRole("status");
const dialog = () => page.getByRole("dialog");

/** Creates an entity through the API and answers its id. */
async function entity(name: string, metadata: Record<string, string>) {
  const res = await stack.api.post("/entity", { entity_name: name, entity_type: "customer", metadata });
  expect(res.status).toBe(200);
  return res.body.entity.entity_id as string;
}

/** Clicks the dialog's confirming button once it asks `title`. */
async function confirm(title: RegExp, button: string, reason?: string) {
  await dialog().getByRole("heading", { name: title }).waitFor();
  if (reason !== undefined) await dialog().getByLabel("Reason (optional)").fill(reason);
  await dialog().getByRole("button", { name: button, exact: true }).click();
}

describe("/console's ledger view in headless Chromium", () => {
  it("searches entities, shows an entity's money, statement, chart, CSV, holds and alerts, and a group's legs, lifecycle and events", async () => {
    // ---- through the API first
    // The destination hears only reversals; it refuses the first attempt, so that delivery has two.
    const hook = receiver.endpoint("/ledger-console", (n) => (n === 1 ? { status: 503, body: "busy" } : { status: 200 }));
    expect((await stack.api.post("/webhooks", { url: hook, name: "Reversals", event_types: ["transaction.reversed"] })).status).toBe(200);
    const alice = await entity("Alice Wallet", { tier: "gold" });
    const bob = await entity("Bob Wallet", { tier: "silver" });
    const carol = await entity("Carol Store", { tier: "gold" });
    expect((await stack.api.post("/entity/freeze", { entity_id: carol, reason: "review" })).status).toBe(200);
    expect((await stack.api.post("/entity/fund", { entity_id: alice, amount: 1_000_000 })).status).toBe(200);
    // 12 posted transfers: 11 of 10.00 and one of 56.67, which leave Alice 9,833.33 posted.
    for (const amount of [...Array(11).fill(1_000), 5_667]) {
      const res = await stack.api.post("/transaction", {
        description: "Rent",
        amount,
        status: "posted",
        account: { from: alice, to: bob },
      });
      expect(res.status).toBe(200);
    }
    const pending = await stack.api.post("/transaction", {
      description: "Pending order",
      amount: 2_500,
      account: { from: alice, to: bob },
    });
    const group = pending.body.transaction_group_id as string;
    expect((await stack.api.post("/hold", { entity_id: alice, amount: 700, description: "Card auth" })).status).toBe(200);

    // ---- the key, and the entities
    await page.goto(`${base}/console`);
    await page.getByLabel("API key").fill(stack.account.api_key);
    await page.getByLabel("API key").press("Enter");
    const entities = page.getByRole("table", { name: "Entities" });
    await entities.getByRole("button", { name: "Open Carol Store" }).waitFor();

    const search = page.getByRole("form", { name: "Search entities" });
    const listed = async () => (await entities.getByRole("button", { name: /^Open / }).allTextContents()).sort();
    // The name goes to the API as its `name` filter: the page matches nothing itself.
    await search.getByLabel("Name contains").fill(" WALLET ");
    const named = page.waitForRequest((req) => {
      const url = new URL(req.url());
      return url.pathname.endsWith("/entities") && url.searchParams.get("name") === "WALLET" && url.searchParams.get("limit") === "20";
    });
    await search.getByRole("button", { name: "Search entities" }).click();
    await named;
    await status().filter({ hasText: "2 entities found" }).waitFor();
    expect(await listed()).toEqual(["Alice Wallet", "Bob Wallet"]);
    await shot("entities-by-name");
    await search.getByLabel("Name contains").fill("");
    await search.getByLabel("Status").selectOption("frozen");
    await search.getByRole("button", { name: "Search entities" }).click();
    await status().filter({ hasText: "1 entity found" }).waitFor();
    expect(await listed()).toEqual(["Carol Store"]);
    await search.getByLabel("Status").selectOption("");
    await search.getByLabel("Metadata key").fill("tier");
    await search.getByLabel("Metadata value").fill("gold");
    await search.getByRole("button", { name: "Search entities" }).click();
    await status().filter({ hasText: "2 entities found" }).waitFor();
    expect(await listed()).toEqual(["Alice Wallet", "Carol Store"]);
    await search.getByLabel("Name contains").fill("alice");
    await search.getByRole("button", { name: "Search entities" }).click();
    await status().filter({ hasText: "1 entity found" }).waitFor();
    expect(await listed()).toEqual(["Alice Wallet"]);
    await shot("entities-by-metadata");

    // ---- an entity: balances in its currency, the raw integer on hover
    await entities.getByRole("button", { name: "Open Alice Wallet" }).click();
    await page.getByRole("heading", { name: "Entity Alice Wallet" }).waitFor();
    const balances = page.getByRole("table", { name: "Balances of Alice Wallet" });
    const balance = (label: string) => balances.getByRole("row", { name: new RegExp(`^${label}`) }).locator(".amount");
    expect(await balance("Posted").textContent()).toBe("9,833.33 USD");
    expect(await balance("Posted").getAttribute("title")).toBe("983333 minor units");
    expect(await balance("Pending debits").textContent()).toBe("25.00 USD");
    expect(await balance("Held").textContent()).toBe("7.00 USD");
    // 983333 - 2500 pending - 700 held.
    expect(await balance("Available").textContent()).toBe("9,801.33 USD");
    expect(await balance("Overdraft limit").textContent()).toBe("0.00 USD");
    await shot("entity");

    // ---- status, each step behind the confirmation
    await page.getByRole("button", { name: "Close Alice Wallet" }).click();
    await dialog().getByRole("button", { name: "Cancel" }).click();
    await status().filter({ hasText: "Close canceled" }).waitFor();
    expect((await stack.api.get("/entity", { entity_id: alice })).body.entity.status).toBe("active");
    await page.getByRole("button", { name: "Freeze Alice Wallet" }).click();
    await confirm(/^Freeze Alice Wallet/, "Freeze entity", "chargeback review");
    await status().filter({ hasText: "Alice Wallet is frozen" }).waitFor();
    expect((await stack.api.get("/entity", { entity_id: alice })).body.entity).toMatchObject({
      status: "frozen",
      status_reason: "chargeback review",
    });
    await shot("entity-frozen");
    await page.getByRole("button", { name: "Unfreeze Alice Wallet" }).click();
    await confirm(/^Unfreeze Alice Wallet/, "Unfreeze entity");
    await status().filter({ hasText: "Alice Wallet is active" }).waitFor();
    expect((await stack.api.get("/entity", { entity_id: alice })).body.entity.status).toBe("active");

    // ---- the chart: one point per posted leg, at the balance the statement gives
    const from = new Date(Date.now() - 86_400_000).toISOString();
    const to = new Date(Date.now() + 3_600_000).toISOString();
    const statement = (await stack.api.get("/entity/statement", { entity_id: alice, from, to, limit: "1000" })).body;
    expect(statement.entries).toHaveLength(13);
    // A quick period: the last hour, up to an hour ahead.
    await page.getByLabel("Quick period").selectOption({ label: "Last hour" });
    await status()
      .filter({ hasText: /^Showing / })
      .waitFor();
    const chart = page.getByRole("img", { name: /^Posted balance of Alice Wallet/ });
    await chart.waitFor();
    const circles = chart.locator("circle");
    const points: [string | null, number][] = [];
    for (let i = 0; i < (await circles.count()); i++) {
      const point = circles.nth(i);
      points.push([await point.getAttribute("data-posted-at"), Number(await point.getAttribute("data-posted-after"))]);
    }
    expect(points).toEqual(statement.entries.map((e: { posted_at: string; posted_after: number }) => [e.posted_at, e.posted_after]));
    expect(await chart.getAttribute("aria-label")).toMatch(/0\.00 USD to 9,833\.33 USD, 13 posted legs/);
    await shot("chart");

    // ---- the statement, 10 rows a page
    const rows = page.getByRole("table", { name: "Statement of Alice Wallet" }).getByRole("row");
    await expect.poll(() => rows.count()).toBe(11);
    expect(await rows.nth(1).locator(".amount").last().textContent()).toBe("10,000.00 USD");
    await page.getByRole("button", { name: "Next statement page" }).click();
    await page.getByText("Page 2", { exact: true }).waitFor();
    await expect.poll(() => rows.count()).toBe(4);
    const last = rows.nth(3).getByRole("cell");
    expect(await last.nth(3).textContent()).toBe("56.67 USD");
    expect(await last.nth(5).textContent()).toBe("9,833.33 USD");
    expect(await page.getByRole("button", { name: "Next statement page" }).isVisible()).toBe(false);
    await shot("statement-page-2");
    await page.getByRole("button", { name: "Previous statement page" }).click();
    await page.getByText("Page 1", { exact: true }).waitFor();
    await expect.poll(() => rows.count()).toBe(11);

    // ---- the CSV, made in the page from the statement's pages
    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: "Download statement CSV" }).click(),
    ]);
    const csv = readFileSync((await download.path())!, "utf8")
      .trimEnd()
      .split("\r\n");
    expect(download.suggestedFilename()).toMatch(new RegExp(`^statement-${alice}-.*\\.csv$`));
    expect(csv[0]).toBe(
      "posted_at,transaction_id,transaction_group_id,description,direction,amount_minor,amount,posted_after_minor,posted_after,currency",
    );
    expect(csv.slice(1)).toEqual(
      statement.entries.map(
        (e: {
          posted_at: string;
          transaction_id: string;
          transaction_group_id: string;
          description: string;
          direction: string;
          amount: number;
          posted_after: number;
        }) =>
          [
            e.posted_at,
            e.transaction_id,
            e.transaction_group_id,
            e.description,
            e.direction,
            e.amount,
            (e.amount / 100).toFixed(2),
            e.posted_after,
            (e.posted_after / 100).toFixed(2),
            "USD",
          ].join(","),
      ),
    );
    expect(csv.at(-1)).toMatch(/,debit,5667,56\.67,983333,9833\.33,USD$/);

    // ---- holds
    const holds = page.getByRole("table", { name: "Holds of Alice Wallet" });
    await holds.getByRole("row", { name: /Card auth/ }).waitFor();
    expect(
      await holds
        .getByRole("row", { name: /Card auth/ })
        .locator(".amount")
        .first()
        .textContent(),
    ).toBe("7.00 USD");

    // ---- alerts: create in the currency's units, stored in minor units; delete behind the confirmation
    const alertForm = page.getByRole("form", { name: "New balance alert" });
    await alertForm.getByLabel("Balance").selectOption("available");
    await alertForm.getByLabel("Condition").selectOption("lt");
    await alertForm.getByLabel("Threshold").fill("5,000.50");
    await alertForm.getByRole("button", { name: "Create alert" }).click();
    await status().filter({ hasText: "Alert created: available below 5,000.50 USD" }).waitFor();
    const stored = (await stack.api.get("/entity/alerts", { entity_id: alice })).body.alerts;
    expect(stored).toMatchObject([{ field: "available", operator: "lt", value: 500_050, triggered: false }]);
    const alerts = page.getByRole("table", { name: "Balance alerts of Alice Wallet" });
    await alerts.getByRole("row", { name: /available below 5,000\.50 USD/ }).waitFor();
    await shot("alerts");
    await alerts.getByRole("button", { name: "Delete alert available below 5,000.50 USD" }).click();
    await confirm(/^Delete this alert/, "Delete alert");
    await status().filter({ hasText: "Alert deleted" }).waitFor();
    await alerts.getByText("No balance alerts.").waitFor();
    expect((await stack.api.get("/entity/alerts", { entity_id: alice })).body.alerts).toEqual([]);

    // ---- a transaction group: legs as debit and credit columns, entities named
    await page.getByLabel("Transaction group id").fill(group);
    await page.getByRole("button", { name: "Open group", exact: true }).click();
    await page.getByRole("heading", { name: `Transaction group ${group}` }).waitFor();
    const legs = page.getByRole("table", { name: `Legs of ${group}` });
    // A leg's row: its entity, then the debit and credit cells; the total's row header is no cell.
    const legCells = async (name: string) => legs.getByRole("row").filter({ hasText: name }).getByRole("cell").allTextContents();
    await legs.getByRole("button", { name: "Open Alice Wallet" }).waitFor();
    expect(await legCells("Alice Wallet")).toEqual(["Alice Wallet", "25.00 USD", ""]);
    expect(await legCells("Bob Wallet")).toEqual(["Bob Wallet", "", "25.00 USD"]);
    expect(await legCells("Total")).toEqual(["25.00 USD", "25.00 USD"]);
    expect(await page.locator("#group-status").textContent()).toBe("pending");
    await shot("group-pending");

    // Post, then reverse, each behind the confirmation; the group's events follow.
    await page.getByRole("button", { name: `Post ${group}` }).click();
    await confirm(new RegExp(`^Post ${group}`), "Post group");
    await status()
      .filter({ hasText: `${group} is posted` })
      .waitFor();
    expect((await stack.api.get("/transaction/group", { transaction_group_id: group })).body.transaction_group.status).toBe("posted");
    await page.getByRole("button", { name: `Reverse ${group}` }).click();
    await confirm(new RegExp(`^Reverse ${group}`), "Reverse group");
    await status()
      .filter({ hasText: `${group} is reversed. Its reversal is trx-grp_` })
      .waitFor();
    // Alice's chart and statement follow: the post's debit and the reversal's credit are two more legs.
    await expect.poll(() => chart.getAttribute("aria-label")).toMatch(/to 9,833\.33 USD, 15 posted legs$/);
    const events = page.getByRole("table", { name: `Events of ${group}` });
    const eventTypes = async () => {
      await page.getByRole("button", { name: "Refresh group events" }).click();
      await page.waitForTimeout(100);
      // The Type column of each row after the header.
      return (await events.getByRole("row").all()).slice(1).map((row) => row.getByRole("cell").nth(1).textContent());
    };
    await expect
      .poll(async () => Promise.all(await eventTypes()), { timeout: 20_000 })
      .toEqual(["transaction.reversed", "transaction.posted", "transaction.created"]);
    await page
      .getByRole("paragraph")
      .filter({ hasText: "Reversed by" })
      .getByRole("button", { name: /^Open group trx-grp_/ })
      .waitFor();
    await shot("group-reversed");

    // ---- a delivery's attempts, one by one: a 503, then a 200
    await page.getByRole("table", { name: "Destinations" }).getByRole("button", { name: "Deliveries of Reversals" }).click();
    const deliveries = page.getByRole("table", { name: "Deliveries to Reversals" });
    await expect
      .poll(
        async () => {
          await page.getByRole("button", { name: "Refresh deliveries" }).click();
          await page.waitForTimeout(150);
          return deliveries.getByRole("row").filter({ hasText: "succeeded" }).count();
        },
        { timeout: 20_000 },
      )
      .toBe(1);
    await deliveries.getByRole("button", { name: /^Attempts of whd_/ }).click();
    const attempts = page.getByRole("table", { name: /^Attempts of delivery whd_/ });
    await expect.poll(() => attempts.getByRole("row").count()).toBe(3);
    const attempt = async (n: number) =>
      (await attempts.getByRole("row").nth(n).getByRole("cell").allTextContents()).filter((_, i) => [0, 2, 3, 5].includes(i));
    expect(await attempt(1)).toEqual(["2", "succeeded", "200", "—"]);
    expect(await attempt(2)).toEqual(["1", "failed", "503", "—"]);
    expect(await attempts.getByRole("row").nth(2).getByRole("cell").nth(4).textContent()).toMatch(/^\d+ ms$/);
    await shot("delivery-attempts");

    expect(watched.outside).toEqual([]);
    expect(watched.problems).toEqual([]);
  }, 120_000);
});
