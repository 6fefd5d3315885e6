/**
 * The alerts of deploy/components/monitoring/prometheus-rules.yaml, checked and run by promtool
 * (Prometheus's own tool, Debian's `prometheus` package; scripts/ensure-promtool.sh installs it) on
 * the example series of deploy/alerts.test-cases.yaml: each alert fires on the series meant to fire it,
 * with its labels and annotations, and stays quiet on the others. Every alert names a runbook
 * section that exists in docs/operations.md.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const MONITORING = join(ROOT, "deploy", "components", "monitoring");
const PROMTOOL = process.env["PROMTOOL"] ?? "promtool";

interface Rule {
  alert: string;
  annotations: { runbook_url: string; summary: string };
}
const resource = parse(readFileSync(join(MONITORING, "prometheus-rules.yaml"), "utf8")) as {
  kind: string;
  spec: { groups: { name: string; rules: Rule[] }[] };
};
const dir = mkdtempSync(join(tmpdir(), "ledger-alerts-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function promtool(args: string[]): string {
  if (spawnSync(PROMTOOL, ["--version"]).error)
    throw new Error(`promtool did not start (${PROMTOOL}): bash scripts/ensure-promtool.sh installs Debian's prometheus package`);
  try {
    return execFileSync(PROMTOOL, args, { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    throw new Error(`promtool ${args.join(" ")} failed:\n${e.stdout ?? ""}${e.stderr ?? ""}`);
  }
}

describe("alerts", () => {
  // promtool reads a plain rule file: the PrometheusRule's spec is one.
  writeFileSync(join(dir, "rules.yaml"), stringify(resource.spec));
  copyFileSync(join(ROOT, "deploy", "alerts.test-cases.yaml"), join(dir, "alerts.test-cases.yaml"));

  it("are a PrometheusRule whose rules promtool accepts", () => {
    expect(resource.kind).toBe("PrometheusRule");
    expect(promtool(["check", "rules", "rules.yaml"])).toMatch(/SUCCESS/);
  });

  it("fire on the example series meant to fire them, and only on those", () => {
    expect(promtool(["test", "rules", "alerts.test-cases.yaml"])).toMatch(/SUCCESS/);
  });

  it("each have example series, and a runbook section in docs/operations.md", () => {
    const cases = readFileSync(join(ROOT, "deploy", "alerts.test-cases.yaml"), "utf8");
    const operations = readFileSync(join(ROOT, "docs", "operations.md"), "utf8");
    const anchors = new Set([...operations.matchAll(/^#{2,4} (.+)$/gm)].map((m) => githubAnchor(m[1] ?? "")));
    const alerts = resource.spec.groups.flatMap((g) => g.rules.map((r) => r));
    expect(alerts.length).toBeGreaterThanOrEqual(9);
    for (const rule of alerts) {
      expect(cases, rule.alert).toContain(`alertname: ${rule.alert}`);
      expect(rule.annotations.runbook_url).toBe(`docs/operations.md#alert-${rule.alert.toLowerCase()}`);
      expect(anchors, rule.alert).toContain(`alert-${rule.alert.toLowerCase()}`);
    }
  });
});

/** The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as dashes. */
function githubAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");
}
