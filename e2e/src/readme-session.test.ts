import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { readGatewayConfig } from "@ledger/gateway";
import { readHoldConfig } from "@ledger/hold-service";
import { readLedgerConfig } from "@ledger/ledger-service";
import { readNotificationConfig } from "@ledger/notification-service";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { restClient } from "./rest-client.js";
import { startStack, type Stack } from "./stack.js";

// The README's first session with curl, run as written in bash against a stack: the CLI command,
// every curl line and the ids a reader copies from one answer into the next command. A reader's
// copying is done by `export` (readme-session.sh), which fills each `VAR=prefix...` placeholder from
// the answer it follows, so a placeholder after the wrong answer or naming a field the API does not
// return fails here. Then the balances the README states.

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** The fenced shell block under the README's "A first session with curl". */
function readmeSession(): string {
  const readme = readFileSync(`${ROOT}README.md`, "utf8");
  const section = readme.slice(readme.indexOf("## A first session with curl"));
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error("README.md has no shell block under 'A first session with curl'");
  return block;
}

/** Records the answers and fills the placeholders (see the file). */
const PREAMBLE = readFileSync(fileURLToPath(new URL("./readme-session.sh", import.meta.url)), "utf8");

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

it("runs the README's first session as written and ends with the balances it states", async () => {
  const script = `${PREAMBLE}\n${readmeSession()}\nprintf 'IDS %s %s %s\\n' "$KEY" "$BOB" "$ALICE"\n`;
  const { stdout } = await run("bash", ["-c", script], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: inject("databaseUrl"), SESSION_API: stack.restUrl },
  });
  const lines = stdout.trim().split("\n");
  const [key, bob, alice] = lines.pop()!.split(" ").slice(1);
  // Every answer a success: the account's JSON, then each curl's envelope.
  const answers = lines.map((line) => JSON.parse(line));
  expect(answers[0].api_key).toBe(key);
  for (const answer of answers.slice(1)) expect(answer.status, JSON.stringify(answer)).toBe("success");
  expect(answers.at(-1).entity.entity_id).toBe(alice);
  expect(answers.at(-1).entity.balances).toMatchObject({ posted: 7_500, available: 7_500 });

  const api = restClient(stack.restUrl, key!);
  expect((await api.get("/entity", { entity_id: bob! })).body.entity.balances).toMatchObject({ posted: 2_500, available: 2_500 });
  const external = (await api.get("/program")).body.program.external_entity_id;
  expect((await api.get("/entity", { entity_id: external })).body.entity.balances.posted).toBe(-10_000);
});

it("gives the quick start's ports as the code's defaults, the ops port with /metrics and /readyz among them", () => {
  const gateway = readGatewayConfig({});
  const quickStart = readFileSync(`${ROOT}README.md`, "utf8").split("## A first session with curl")[0]!.replace(/\s+/g, " ");
  expect(quickStart).toContain(`REST on \`http://127.0.0.1:${gateway.port}/v1\``);
  expect(quickStart).toContain(`\`/metrics\` and \`/readyz\` on the ops port, \`http://127.0.0.1:${gateway.opsPort}\``);
  expect(quickStart).toContain(
    `the ledger (RPC on :${readLedgerConfig({}).port}), the hold service (:${readHoldConfig({}).port}), the notification service (:${readNotificationConfig({}, () => {}).port})`,
  );
  for (const variable of [
    "PORT",
    "GATEWAY_OPS_PORT",
    "LEDGER_PORT",
    "HOLD_PORT",
    "NOTIFICATION_PORT",
    "NATS_STREAM",
    "NATS_SUBJECT_PREFIX",
  ]) {
    expect(quickStart).toContain(`\`${variable}\``);
  }
});
