import { createHmac } from "node:crypto";
import Stripe from "stripe";
import { describe, expect, it } from "vitest";
import { verifyWebhook, type WebhookVerificationError } from "./index.js";

const secret = "whsec_first";
const rolled = "whsec_second";
const body = JSON.stringify({ id: "evt_1", type: "transaction.posted", created: 1_800_000_000, data: { amount: 5 } });
const sign = (key: string, t: number, raw = body) => createHmac("sha256", key).update(`${t}.${raw}`).digest("hex");
const now = 1_800_000_000;

function reason(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return (err as WebhookVerificationError).reason;
  }
  return "accepted";
}

describe("verifyWebhook", () => {
  it("accepts a valid signature and returns the parsed body", () => {
    const header = `t=${now},v1=${sign(secret, now)}`;
    expect(verifyWebhook(body, header, secret, { now })).toMatchObject({ id: "evt_1", data: { amount: 5 } });
    expect(verifyWebhook(Buffer.from(body), header, [secret], { now })).toMatchObject({ id: "evt_1" });
  });

  it("accepts either secret during a roll, and a header carrying both signatures", () => {
    const both = `t=${now},v1=${sign(rolled, now)},v1=${sign(secret, now)}`;
    expect(reason(() => verifyWebhook(body, both, [secret], { now }))).toBe("accepted");
    expect(reason(() => verifyWebhook(body, both, [rolled], { now }))).toBe("accepted");
    expect(reason(() => verifyWebhook(body, `t=${now},v1=${sign(secret, now)}`, [rolled, secret], { now }))).toBe("accepted");
  });

  it("refuses a tampered body, another secret, stale and future timestamps, and malformed headers", () => {
    const header = `t=${now},v1=${sign(secret, now)}`;
    expect(reason(() => verifyWebhook(body.replace("5", "6"), header, secret, { now }))).toBe("no_matching_signature");
    expect(reason(() => verifyWebhook(body, header, "whsec_other", { now }))).toBe("no_matching_signature");
    expect(reason(() => verifyWebhook(body, header, secret, { now: now + 301 }))).toBe("timestamp_out_of_tolerance");
    expect(reason(() => verifyWebhook(body, header, secret, { now: now - 301 }))).toBe("timestamp_out_of_tolerance");
    expect(reason(() => verifyWebhook(body, header, secret, { now: now + 30, toleranceSeconds: 10 }))).toBe("timestamp_out_of_tolerance");
    expect(reason(() => verifyWebhook(body, undefined, secret, { now }))).toBe("malformed_header");
    expect(reason(() => verifyWebhook(body, `v1=${sign(secret, now)}`, secret, { now }))).toBe("malformed_header");
    expect(reason(() => verifyWebhook(body, `t=${now},v1=zz`, secret, { now }))).toBe("malformed_header");
    expect(reason(() => verifyWebhook(body, header, [], { now }))).toBe("no_secret");
  });

  it("agrees with Stripe's verifier, an independent implementation of the same scheme", () => {
    const t = Math.floor(Date.now() / 1000);
    const header = `t=${t},v1=${sign(secret, t)}`;
    expect(new Stripe("sk_test_unused").webhooks.signature!.verifyHeader(body, header, secret)).toBe(true);
    expect(reason(() => verifyWebhook(body, header, secret))).toBe("accepted");
  });
});
