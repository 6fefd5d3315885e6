/**
 * CI for deploy/: every manifest parses, validates against the Kubernetes schemas
 * (kubernetes-models validates on construction), and names only things that exist in the code:
 * the image the Dockerfile builds, entry points that are files, env variables the config readers
 * read, probe paths the servers answer and container ports equal to the ports set by env.
 * When kubectl is on the machine, the overlays are also rendered with its kustomize and checked
 * the same way; without it, each overlay's own files are checked as they are.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const DEPLOY = join(ROOT, "deploy");

type Obj = { apiVersion: string; kind: string; metadata: { name: string }; [key: string]: unknown };
type Container = { name: string; image?: string; command?: string[]; ports?: { name?: string; containerPort: number }[]; env?: { name: string; value?: string; valueFrom?: unknown }[]; [k: string]: unknown };

function parseFile(path: string): Obj[] {
  return parseYamlText(readFileSync(path, "utf8"), path);
}

function parseYamlText(text: string, where: string): Obj[] {
  const docs = parseAllDocuments(text);
  return docs
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`${where}: ${doc.errors.map((e) => e.message).join("; ")}`);
      return doc.toJS() as Obj | null;
    })
    .filter((o): o is Obj => o !== null);
}

function yamlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? yamlFiles(join(dir, e.name)) : e.name.endsWith(".yaml") ? [join(dir, e.name)] : [],
  );
}

/** Custom resources kubernetes-models does not know; their required fields are checked by hand. */
const CUSTOM = new Set(["postgresql.cnpg.io/v1/Cluster", "kustomize.config.k8s.io/v1beta1/Kustomization"]);

/** Constructs and validates an object with its kubernetes-models class, found by apiVersion and kind. */
async function validateAgainstSchema(obj: Obj, patch: boolean): Promise<void> {
  if (CUSTOM.has(`${obj.apiVersion}/${obj.kind}`)) return;
  const mod = (await import(/* @vite-ignore */ `kubernetes-models/${obj.apiVersion}`)) as Record<string, new (data: unknown) => { validate(): void }>;
  const Model = mod[obj.kind];
  if (!Model) throw new Error(`kubernetes-models has no ${obj.apiVersion} ${obj.kind}`);
  // A strategic-merge patch is a partial object: only its types are checked, not required fields.
  if (patch) return;
  new Model(obj).validate();
}

function podSpecOf(obj: Obj): { containers: Container[]; securityContext?: Record<string, unknown>; volumes?: unknown[] } | undefined {
  const spec = obj["spec"] as Record<string, any> | undefined;
  if (obj.kind === "Deployment" || obj.kind === "StatefulSet" || obj.kind === "Job") return spec?.["template"]?.["spec"];
  return undefined;
}

/** Every env variable any process of the repository reads: the config readers and the migrate entry. */
function codeEnvNames(): Set<string> {
  const files = [
    "packages/common/src/config.ts",
    "packages/common/src/logger.ts",
    "services/ledger/src/config.ts",
    "services/hold/src/config.ts",
    "services/notification/src/config.ts",
    "gateway/src/config.ts",
    "deploy/migrate.ts",
  ];
  const names = new Set<string>();
  for (const f of files) {
    for (const m of readFileSync(join(ROOT, f), "utf8").matchAll(/["']([A-Z][A-Z0-9_]{2,})["']/g)) names.add(m[1]!);
  }
  return names;
}

/** The variable that sets each entry point's listening port, and the host variable that must be 0.0.0.0. */
const PORT_ENV: Record<string, { port: string; host: string }> = {
  "services/ledger/src/main.ts": { port: "LEDGER_PORT", host: "LEDGER_HOST" },
  "services/hold/src/main.ts": { port: "HOLD_PORT", host: "HOLD_HOST" },
  "services/notification/src/main.ts": { port: "NOTIFICATION_PORT", host: "NOTIFICATION_HOST" },
  "gateway/src/main.ts": { port: "PORT", host: "GATEWAY_HOST" },
};

/** Checks that a workload of ours names only what exists in the code. */
function checkAgainstCode(obj: Obj, envNames: Set<string>, imageName: string | undefined): void {
  const pod = podSpecOf(obj);
  if (!pod) return;
  for (const c of pod.containers ?? []) {
    const where = `${obj.kind}/${obj.metadata.name} container ${c.name}`;
    const ours = c.command?.[0] === "node";
    if (!ours) continue;
    if (imageName !== undefined) expect(c.image, `${where}: image`).toBe(imageName);
    expect(c.command?.slice(0, 3), `${where}: command`).toEqual(["node", "--import", "tsx"]);
    const entry = c.command![3]!;
    expect(existsSync(join(ROOT, entry)), `${where}: entry point ${entry} exists`).toBe(true);
    const env = new Map((c.env ?? []).map((e) => [e.name, e]));
    for (const name of env.keys()) expect(envNames.has(name), `${where}: env ${name} is read by the code`).toBe(true);
    // Secrets are referenced, never inlined.
    for (const secret of ["DATABASE_URL", "SERVICE_TOKEN", "NOTIFICATION_SECRET_KEY", "LEDGER_DATABASE_URL", "HOLD_DATABASE_URL", "NOTIFICATION_DATABASE_URL"]) {
      const e = env.get(secret);
      if (e) expect((e.valueFrom as { secretKeyRef?: unknown } | undefined)?.secretKeyRef, `${where}: ${secret} from a secretKeyRef`).toBeDefined();
      if (e) expect(e.value, `${where}: ${secret} has no inline value`).toBeUndefined();
    }
    const portEnv = PORT_ENV[entry];
    if (portEnv) {
      expect(env.get(portEnv.host)?.value, `${where}: ${portEnv.host}`).toBe("0.0.0.0");
      const port = Number(env.get(portEnv.port)?.value);
      const ports = c.ports ?? [];
      expect(ports.map((p) => p.containerPort), `${where}: containerPort equals ${portEnv.port}`).toEqual([port]);
      for (const probe of ["readinessProbe", "livenessProbe", "startupProbe"] as const) {
        const get = (c[probe] as { httpGet?: { path: string; port: string | number } } | undefined)?.httpGet;
        if (probe !== "startupProbe") expect(get, `${where}: ${probe}`).toBeDefined();
        if (!get) continue;
        expect(get.path, `${where}: ${probe} path`).toBe(probe === "readinessProbe" ? "/readyz" : "/healthz");
        const probePort = typeof get.port === "number" ? get.port : ports.find((p) => p.name === get.port)?.containerPort;
        expect(probePort, `${where}: ${probe} port`).toBe(port);
      }
      expect(c["resources"], `${where}: resources`).toMatchObject({ requests: { cpu: expect.anything(), memory: expect.anything() }, limits: { memory: expect.anything() } });
    }
    const sc = c["securityContext"] as Record<string, any> | undefined;
    expect(sc, `${where}: securityContext`).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } });
    expect(pod.securityContext?.["runAsNonRoot"], `${where}: runAsNonRoot`).toBe(true);
    expect((c as { volumeMounts?: { mountPath: string }[] }).volumeMounts?.some((m) => m.mountPath === "/tmp"), `${where}: /tmp mounted`).toBe(true);
  }
}

function checkCnpgCluster(obj: Obj): void {
  const spec = obj["spec"] as Record<string, any>;
  expect(typeof spec?.["instances"], "Cluster spec.instances").toBe("number");
  expect(spec["storage"]?.["size"], "Cluster spec.storage.size").toMatch(/^\d+(Mi|Gi|Ti)$/);
  if (spec["minSyncReplicas"] !== undefined) expect(spec["minSyncReplicas"]).toBeLessThan(spec["instances"]);
}

const envNames = codeEnvNames();

describe("deploy/base", () => {
  const kustomization = parseFile(join(DEPLOY, "base/kustomization.yaml"))[0] as unknown as { resources: string[] };
  const objects = kustomization.resources.flatMap((r) => parseFile(join(DEPLOY, "base", r)));

  it("lists every manifest file except the secret example", () => {
    const files = readdirSync(join(DEPLOY, "base")).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
    expect(new Set(kustomization.resources)).toEqual(new Set(files.filter((f) => f !== "secret.example.yaml")));
  });

  it("validates every object against the Kubernetes schemas", async () => {
    for (const obj of objects) await validateAgainstSchema(obj, false);
    for (const obj of objects.filter((o) => o.kind === "Cluster")) checkCnpgCluster(obj);
  });

  it("names only images, entry points, env variables, ports and probe paths that exist", () => {
    for (const obj of objects) checkAgainstCode(obj, envNames, "ledger");
    const workloads = objects.filter((o) => o.kind === "Deployment").map((o) => o.metadata.name);
    expect(workloads.sort()).toEqual(["gateway", "hold", "ledger", "notification"]);
  });

  it("gives each Deployment a Service, ServiceAccount and PDB, and the gateway an HPA", () => {
    const names = (kind: string) => objects.filter((o) => o.kind === kind).map((o) => o.metadata.name);
    for (const d of names("Deployment")) {
      expect(names("Service")).toContain(d);
      expect(names("ServiceAccount")).toContain(d);
      expect(names("PodDisruptionBudget")).toContain(d);
    }
    expect(names("HorizontalPodAutoscaler")).toContain("gateway");
    // Each Service's targetPort names a port of the pods it selects.
    for (const svc of objects.filter((o) => o.kind === "Service" && o.metadata.name !== "nats-headless")) {
      const spec = svc["spec"] as { selector: Record<string, string>; ports: { targetPort: string }[] };
      const target = objects.find((o) => podSpecOf(o) && Object.entries(spec.selector).every(([k, v]) => ((o["spec"] as any).template.metadata.labels ?? {})[k] === v));
      expect(target, `Service ${svc.metadata.name} selects a workload`).toBeDefined();
      const portNames = podSpecOf(target!)!.containers.flatMap((c) => (c.ports ?? []).map((p) => p.name));
      for (const p of spec.ports) expect(portNames, `Service ${svc.metadata.name} targetPort`).toContain(p.targetPort);
    }
  });

  it("references secrets and ships only an example, with no real value", () => {
    const example = parseFile(join(DEPLOY, "base/secret.example.yaml"))[0]!;
    expect(example.kind).toBe("Secret");
    for (const v of Object.values(example["stringData"] as Record<string, string>)) expect(v).toMatch(/^REPLACE_WITH_/);
    expect(objects.some((o) => o.kind === "Secret")).toBe(false);
  });

  it("lets only the gateway take traffic from outside", () => {
    const policies = objects.filter((o) => o.kind === "NetworkPolicy");
    expect(policies.some((p) => p.metadata.name === "default-deny")).toBe(true);
    for (const p of policies) {
      const ingress = ((p["spec"] as any).ingress ?? []) as { from?: unknown[] }[];
      const open = ingress.some((rule) => !rule.from || rule.from.length === 0);
      if (open) expect(p.metadata.name, "only the gateway policy has an ingress rule without `from`").toBe("gateway");
    }
  });

  it("runs NATS as a three-node JetStream cluster with a route to each node", () => {
    const sts = objects.find((o) => o.kind === "StatefulSet" && o.metadata.name === "nats")!;
    expect((sts["spec"] as any).replicas).toBe(3);
    const conf = (objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === "nats-config")!["data"] as any)["nats.conf"] as string;
    expect(conf).toMatch(/jetstream\s*\{[^}]*store_dir/);
    for (const i of [0, 1, 2]) expect(conf).toContain(`nats://nats-${i}.nats-headless:6222`);
  });
});

describe("deploy/overlays", () => {
  for (const overlay of ["dev", "prod"]) {
    it(`${overlay}: every file parses and validates as a patch`, async () => {
      for (const file of yamlFiles(join(DEPLOY, "overlays", overlay))) {
        for (const obj of parseFile(file)) {
          await validateAgainstSchema(obj, true);
          for (const c of podSpecOf(obj)?.containers ?? []) {
            for (const e of c.env ?? []) expect(envNames.has(e.name), `${file}: env ${e.name}`).toBe(true);
          }
        }
      }
    });

    const kubectl = (() => {
      try {
        execFileSync("kubectl", ["version", "--client"], { stdio: "ignore" });
        return true;
      } catch {
        return false;
      }
    })();
    it.skipIf(!kubectl)(`${overlay}: renders with kustomize and every rendered object validates`, async () => {
      const text = execFileSync("kubectl", ["kustomize", join(DEPLOY, "overlays", overlay)], { encoding: "utf8" });
      const objects = parseYamlText(text, `overlay ${overlay}`);
      for (const obj of objects) await validateAgainstSchema(obj, false);
      for (const obj of objects.filter((o) => o.kind === "Cluster")) checkCnpgCluster(obj);
      for (const obj of objects) checkAgainstCode(obj, envNames, undefined);
      expect(objects.filter((o) => o.kind === "Deployment")).toHaveLength(4);
    });
  }
});

describe("Dockerfile", () => {
  const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");

  it("copies every workspace package's package.json, so --frozen-lockfile can install", () => {
    const workspace = parseAllDocuments(readFileSync(join(ROOT, "pnpm-workspace.yaml"), "utf8"))[0]!.toJS() as { packages: string[] };
    const dirs = workspace.packages.flatMap((p) =>
      p.endsWith("/*") ? readdirSync(join(ROOT, p.slice(0, -2)), { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => `${p.slice(0, -2)}/${e.name}`) : [p],
    );
    for (const dir of dirs.filter((d) => existsSync(join(ROOT, d, "package.json")))) {
      expect(dockerfile, `Dockerfile copies ${dir}/package.json`).toContain(`COPY ${dir}/package.json ${dir}/`);
    }
  });

  it("builds on Node 20 slim, installs pnpm 10 with npm, and runs as a non-root uid", () => {
    expect(dockerfile).toMatch(/^FROM node:20-slim AS /m);
    expect(dockerfile).toMatch(/npm install --global [^\n]*pnpm@10\./);
    expect(dockerfile).toContain("pnpm install --frozen-lockfile --prod=false");
    expect(dockerfile).toMatch(/^USER [1-9]\d*:[1-9]\d*$/m);
  });
});
