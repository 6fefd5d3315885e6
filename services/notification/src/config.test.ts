import { ConfigError } from "@ledger/common";
import { describe, expect, it } from "vitest";
import { parseRetrySchedule, readNotificationConfig } from "./config.js";
import { decryptSecret, encryptSecret, generateSecret } from "./secrets.js";
import { signatureHeader } from "./webhook-signer.js";
import { retryDelayMs } from "./delivery-attempt.js";

describe("configuration", () => {
  it("parses retry schedules and names the variable on a bad one", () => {
    expect(parseRetrySchedule("5s,30s,2m,5m,10m,20m,25m")).toEqual([5_000, 30_000, 120_000, 300_000, 600_000, 1_200_000, 1_500_000]);
    expect(parseRetrySchedule("250ms, 1h")).toEqual([250, 3_600_000]);
    for (const bad of ["", "5", "5x", "-1s", "0s", "1.5s"]) expect(() => parseRetrySchedule(bad), bad).toThrow(/WEBHOOK_RETRY_SCHEDULE/);
  });

  it("defaults as docs/configuration.md says and requires a secret key in production", () => {
    const warnings: string[] = [];
    const config = readNotificationConfig({}, (m) => warnings.push(m));
    expect(config).toMatchObject({
      host: "127.0.0.1",
      port: 8083,
      webhookTimeoutMs: 10_000,
      webhookAllowHttp: false,
      webhookAllowPrivateNetworks: false,
    });
    expect(config.webhookRetryScheduleMs).toHaveLength(7);
    expect(warnings).toEqual([expect.stringMatching(/NOTIFICATION_SECRET_KEY/)]);
    const serviceToken = "a-service-token-of-the-installation";
    expect(() => readNotificationConfig({ NODE_ENV: "production", SERVICE_TOKEN: serviceToken })).toThrow(/NOTIFICATION_SECRET_KEY/);
    expect(() => readNotificationConfig({ NOTIFICATION_SECRET_KEY: "c2hvcnQ=" })).toThrow(/NOTIFICATION_SECRET_KEY/);
    const key = Buffer.alloc(32, 7).toString("base64");
    // Its key look-ups at the ledger carry the installation's SERVICE_TOKEN, required in production like the others'.
    expect(() => readNotificationConfig({ NODE_ENV: "production", NOTIFICATION_SECRET_KEY: key })).toThrow(ConfigError);
    expect(() => readNotificationConfig({ NODE_ENV: "production", NOTIFICATION_SECRET_KEY: key })).toThrow(/SERVICE_TOKEN/);
    const production = readNotificationConfig({ NODE_ENV: "production", NOTIFICATION_SECRET_KEY: key, SERVICE_TOKEN: serviceToken });
    expect(production).toMatchObject({ secretKey: Buffer.alloc(32, 7), serviceToken });
    expect(() => readNotificationConfig({ WEBHOOK_TIMEOUT_MS: "fast" }, () => {})).toThrow(/WEBHOOK_TIMEOUT_MS/);
  });
});

describe("secrets", () => {
  it("encrypts at rest, bound to the endpoint id", () => {
    const key = Buffer.alloc(32, 1);
    const secret = generateSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    const stored = encryptSecret(key, "whe_a", secret);
    expect(stored.includes(Buffer.from(secret))).toBe(false);
    expect(decryptSecret(key, "whe_a", stored)).toBe(secret);
    expect(() => decryptSecret(key, "whe_b", stored)).toThrow();
    expect(() => decryptSecret(Buffer.alloc(32, 2), "whe_a", stored)).toThrow();
  });

  it("signs t.body with each secret, newest first", () => {
    expect(signatureHeader("{}", ["whsec_a", "whsec_b"], 1700000000)).toMatch(/^t=1700000000,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
  });
});

describe("retry delays", () => {
  const failed = { status: 500, bodyExcerpt: "", durationMs: 1, error: "" };
  it("follow the schedule with ±10% jitter and stop when it runs out", () => {
    expect(retryDelayMs([1_000, 2_000], 1, failed, () => 0)).toBe(900);
    expect(retryDelayMs([1_000, 2_000], 2, failed, () => 1)).toBe(2_200);
    expect(retryDelayMs([1_000, 2_000], 3, failed)).toBeUndefined();
  });
  it("honour Retry-After on 429 and 503 within the schedule's bounds", () => {
    expect(retryDelayMs([1_000, 60_000], 1, { ...failed, status: 429, retryAfterSeconds: 30 })).toBe(30_000);
    expect(retryDelayMs([1_000, 60_000], 1, { ...failed, status: 503, retryAfterSeconds: 3_600 })).toBe(60_000);
    expect(retryDelayMs([1_000, 60_000], 1, { ...failed, status: 503, retryAfterSeconds: 0 })).toBe(1_000);
    expect(retryDelayMs([1_000, 60_000], 1, { ...failed, status: 500, retryAfterSeconds: 30 }, () => 0.5)).toBe(1_000);
  });
});
