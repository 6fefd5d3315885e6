/**
 * CI for deploy/: every manifest parses, validates against the Kubernetes schemas
 * (kubernetes-models validates on construction), and names only things that exist in the code:
 * the image the Dockerfile builds, compiled entry points built from source files that exist, env variables the config readers
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
import { ENTRIES } from "../scripts/build.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const DEPLOY = join(ROOT, "deploy");

type Obj = { apiVersion: string; kind: string; metadata: { name: string }; [key: string]: unknown };
type Container = {
  name: string;
  image?: string;
  command?: string[];
  ports?: { name?: string; containerPort: number }[];
  env?: { name: string; value?: string; valueFrom?: unknown }[];
  [k: string]: unknown;
};
type PodSpec = { containers: Container[]; securityContext?: Record<string, unknown>; volumes?: unknown[] };

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

/** Custom resources kubernetes-models does not know; their required fields are checked by hand (checkOperations). */
const CUSTOM = new Set([
  "postgresql.cnpg.io/v1/Cluster",
  "postgresql.cnpg.io/v1/ScheduledBackup",
  "postgresql.cnpg.io/v1/Pooler",
  "barmancloud.cnpg.io/v1/ObjectStore",
  "monitoring.coreos.com/v1/ServiceMonitor",
  "monitoring.coreos.com/v1/PodMonitor",
  "monitoring.coreos.com/v1/PrometheusRule",
  "cert-manager.io/v1/Certificate",
  "cert-manager.io/v1/Issuer",
  "kustomize.config.k8s.io/v1beta1/Kustomization",
  "kustomize.config.k8s.io/v1alpha1/Component",
]);

/** Constructs and validates an object with its kubernetes-models class, found by apiVersion and kind. */
async function validateAgainstSchema(obj: Obj, patch: boolean): Promise<void> {
  if (CUSTOM.has(`${obj.apiVersion}/${obj.kind}`)) return;
  const mod = (await import(/* @vite-ignore */ `kubernetes-models/${obj.apiVersion}`)) as Record<
    string,
    new (
      data: unknown,
    ) => { validate(): void }
  >;
  const Model = mod[obj.kind];
  if (!Model) throw new Error(`kubernetes-models has no ${obj.apiVersion} ${obj.kind}`);
  // A strategic-merge patch is a partial object: only its types are checked, not required fields.
  if (patch) return;
  new Model(obj).validate();
}

function podSpecOf(obj: Obj): PodSpec | undefined {
  const spec = obj["spec"] as { template?: { spec?: PodSpec } } | undefined;
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
  // postgres.js reads these itself when a database URL has no user or password (the prod overlay's poolers).
  const names = new Set<string>(["PGUSER", "PGPASSWORD"]);
  for (const f of files) {
    for (const m of readFileSync(join(ROOT, f), "utf8").matchAll(/["']([A-Z][A-Z0-9_]{2,})["']/g)) names.add(m[1]!);
  }
  return names;
}

/** The variable that sets each entry point's listening port, and the host variable that must be 0.0.0.0. */
const PORT_ENV: Record<string, { port: string; host: string; ops?: string }> = {
  "services/ledger/src/main.ts": { port: "LEDGER_PORT", host: "LEDGER_HOST" },
  "services/hold/src/main.ts": { port: "HOLD_PORT", host: "HOLD_HOST" },
  "services/notification/src/main.ts": { port: "NOTIFICATION_PORT", host: "NOTIFICATION_HOST" },
  // The gateway's probes and metrics are on its ops port, which the Ingress never routes to.
  "gateway/src/main.ts": { port: "PORT", host: "GATEWAY_HOST", ops: "GATEWAY_OPS_PORT" },
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
    // Compiled JavaScript on plain node: `node [heap flags] dist/<name>.js`, a bundle
    // scripts/build.mjs makes from a source entry point that exists; no TypeScript loader, and no
    // node flag but the young generation's size and allocation-site pretenuring off
    // (docs/operations.md#memory).
    const script = c.command!.at(-1)!;
    for (const flag of c.command!.slice(1, -1)) {
      expect(flag, `${where}: node flag`).toMatch(/^(--max-semi-space-size=\d+|--no-allocation-site-pretenuring)$/);
    }
    const compiled = /^dist\/([\w-]+)\.js$/.exec(script)?.[1];
    expect(compiled && ENTRIES[compiled], `${where}: ${script} is one of scripts/build.mjs's outputs`).toBeTruthy();
    const entry = ENTRIES[compiled!]!;
    expect(existsSync(join(ROOT, entry)), `${where}: entry point ${entry} exists`).toBe(true);
    const env = new Map((c.env ?? []).map((e) => [e.name, e]));
    for (const name of env.keys()) expect(envNames.has(name), `${where}: env ${name} is read by the code`).toBe(true);
    // Secrets are referenced, never inlined. A database URL may be written out only when it carries
    // no password (a pooler's address, the password then in PGPASSWORD from a secret).
    for (const name of ["DATABASE_URL", "LEDGER_DATABASE_URL", "HOLD_DATABASE_URL", "NOTIFICATION_DATABASE_URL"]) {
      const value = env.get(name)?.value;
      if (value === undefined) continue;
      expect(new URL(value).password, `${where}: ${name} written out carries no password`).toBe("");
      expect(env.get("PGPASSWORD"), `${where}: ${name} written out, with PGPASSWORD beside it`).toBeDefined();
      env.delete(name);
    }
    for (const secret of [
      "DATABASE_URL",
      "SERVICE_TOKEN",
      "NOTIFICATION_SECRET_KEY",
      "LEDGER_DATABASE_URL",
      "HOLD_DATABASE_URL",
      "NOTIFICATION_DATABASE_URL",
      "NATS_PASSWORD",
      "PGPASSWORD",
    ]) {
      const e = env.get(secret);
      if (e)
        expect(
          (e.valueFrom as { secretKeyRef?: unknown } | undefined)?.secretKeyRef,
          `${where}: ${secret} from a secretKeyRef`,
        ).toBeDefined();
      if (e) expect(e.value, `${where}: ${secret} has no inline value`).toBeUndefined();
    }
    const portEnv = PORT_ENV[entry];
    if (portEnv) {
      expect(env.get(portEnv.host)?.value, `${where}: ${portEnv.host}`).toBe("0.0.0.0");
      const port = Number(env.get(portEnv.port)?.value);
      const opsPort = portEnv.ops ? Number(env.get(portEnv.ops)?.value) : undefined;
      const probedPort = opsPort ?? port;
      const ports = c.ports ?? [];
      expect(
        ports.map((p) => p.containerPort),
        `${where}: containerPorts equal ${portEnv.port}${portEnv.ops ? ` and ${portEnv.ops}` : ""}`,
      ).toEqual(opsPort ? [port, opsPort] : [port]);
      for (const probe of ["readinessProbe", "livenessProbe", "startupProbe"] as const) {
        const get = (c[probe] as { httpGet?: { path: string; port: string | number } } | undefined)?.httpGet;
        if (probe !== "startupProbe") expect(get, `${where}: ${probe}`).toBeDefined();
        if (!get) continue;
        expect(get.path, `${where}: ${probe} path`).toBe(probe === "readinessProbe" ? "/readyz" : "/healthz");
        const probePort = typeof get.port === "number" ? get.port : ports.find((p) => p.name === get.port)?.containerPort;
        expect(probePort, `${where}: ${probe} port`).toBe(probedPort);
      }
      expect(c["resources"], `${where}: resources`).toMatchObject({
        requests: { cpu: expect.anything(), memory: expect.anything() },
        limits: { memory: expect.anything() },
      });
    }
    expect(c["securityContext"], `${where}: securityContext`).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(pod.securityContext?.["runAsNonRoot"], `${where}: runAsNonRoot`).toBe(true);
    expect(
      (c as { volumeMounts?: { mountPath: string }[] }).volumeMounts?.some((m) => m.mountPath === "/tmp"),
      `${where}: /tmp mounted`,
    ).toBe(true);
  }
}

function checkCnpgCluster(obj: Obj): void {
  const spec = obj["spec"] as { instances: number; storage?: { size?: string }; minSyncReplicas?: number };
  expect(typeof spec?.["instances"], "Cluster spec.instances").toBe("number");
  expect(spec["storage"]?.["size"], "Cluster spec.storage.size").toMatch(/^\d+(Mi|Gi|Ti)$/);
  if (spec["minSyncReplicas"] !== undefined) expect(spec["minSyncReplicas"]).toBeLessThan(spec["instances"]);
}

// biome-ignore lint/suspicious/noExplicitAny: a manifest is an arbitrary YAML tree; the checks below walk many different paths of it, and a type for each would only repeat the path.
type Spec = Record<string, any>;
const specOf = (o: Obj) => (o["spec"] ?? {}) as Spec;
const labelsMatch = (selector: Record<string, string>, labels: Record<string, string> | undefined) =>
  Object.entries(selector).every(([k, v]) => labels?.[k] === v);

/**
 * What the operations pieces need to agree on, checked by hand where kubernetes-models has no
 * schema (CNPG, Prometheus Operator, cert-manager): HPA-managed Deployments carry no replicas,
 * Postgres is pinned, NATS takes a password and TLS from the Secrets the clients use, and
 * (when present) every backup and monitoring object names a Cluster, Secret, Service, port or
 * pod that exists.
 */
function checkOperations(objects: Obj[], exampleSecrets: Obj[]): void {
  const named = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name);
  // An HPA owns its Deployment's count: a `replicas` would reset it at every apply.
  for (const hpa of objects.filter((o) => o.kind === "HorizontalPodAutoscaler")) {
    const target = specOf(hpa)["scaleTargetRef"] as { kind: string; name: string };
    const deployment = named(target.kind, target.name);
    expect(deployment, `HPA ${hpa.metadata.name} targets an object`).toBeDefined();
    expect(specOf(deployment!)["replicas"], `Deployment ${target.name} has no replicas: its HPA decides`).toBeUndefined();
  }

  // The ledger's cluster (the prod overlay adds one each for the hold and notification services).
  const cluster = named("Cluster", "ledger-postgres")!;
  for (const each of objects.filter((o) => o.kind === "Cluster")) {
    expect(specOf(each)["imageName"], "Postgres image pinned to a minor version or a digest").toMatch(
      /^[\w./-]+(:\d+\.\d+[\w.-]*)?(@sha256:[0-9a-f]{64})?$/,
    );
    expect(specOf(each)["imageName"]).toMatch(/:\d+\.\d+|@sha256:/);
  }
  // Every Pooler serves a Cluster of the render.
  for (const pooler of objects.filter((o) => o.kind === "Pooler")) {
    expect(named("Cluster", specOf(pooler)["cluster"]["name"]), `Pooler ${pooler.metadata.name}'s Cluster`).toBeDefined();
  }

  // NATS: a password from the Secret the clients read, and TLS from the Secret cert-manager writes.
  const conf = (named("ConfigMap", "nats-config")!["data"] as Record<string, string>)["nats.conf"]!;
  expect(conf).toMatch(/authorization\s*\{[^}]*user:\s*ledger[^}]*password:\s*\$NATS_PASSWORD/);
  expect(conf).toMatch(/^\s*tls\s*\{[^}]*cert_file:\s*\/etc\/nats-tls\/tls\.crt/m);
  const sts = named("StatefulSet", "nats")!;
  const natsPod = specOf(sts)["template"]["spec"] as { containers: Container[]; volumes: Spec[] };
  const natsContainer = natsPod.containers.find((c) => c.name === "nats")!;
  const serverPassword = natsContainer.env?.find((e) => e.name === "NATS_PASSWORD")?.valueFrom as Spec | undefined;
  expect(serverPassword?.["secretKeyRef"], "the NATS server reads its password from a Secret").toBeDefined();
  expect(natsPod.volumes.find((v) => v["name"] === "tls")?.["secret"]?.["secretName"]).toBe("nats-tls");
  const certificate = named("Certificate", "nats-tls");
  expect(specOf(certificate!)["secretName"]).toBe("nats-tls");
  expect(specOf(certificate!)["dnsNames"]).toEqual(
    expect.arrayContaining(["nats", "nats-0.nats-headless", "nats-1.nats-headless", "nats-2.nats-headless"]),
  );
  for (const cert of objects.filter((o) => o.kind === "Certificate")) {
    expect(named("Issuer", specOf(cert)["issuerRef"]["name"]), `Certificate ${cert.metadata.name}'s Issuer`).toBeDefined();
  }
  for (const workload of objects) {
    const pod = podSpecOf(workload);
    for (const c of pod?.containers ?? []) {
      const env = new Map((c.env ?? []).map((e) => [e.name, e]));
      if (!env.has("NATS_URL")) continue;
      const where = `${workload.kind}/${workload.metadata.name}`;
      expect(env.get("NATS_USER")?.value, `${where}: NATS_USER`).toBe("ledger");
      expect(
        (env.get("NATS_PASSWORD")?.valueFrom as Spec | undefined)?.["secretKeyRef"],
        `${where}: NATS_PASSWORD as the server's`,
      ).toEqual(serverPassword!["secretKeyRef"]);
      const ca = env.get("NATS_TLS_CA")?.value ?? "";
      const mount = ((c as Spec)["volumeMounts"] as Spec[] | undefined)?.find((m) => ca.startsWith(`${m["mountPath"]}/`));
      expect(mount, `${where}: NATS_TLS_CA ${ca} is in a mounted volume`).toBeDefined();
      const volume = (pod!.volumes as Spec[] | undefined)?.find((v) => v["name"] === mount!["name"]);
      expect(volume?.["secret"]?.["secretName"], `${where}: the CA comes from nats-tls`).toBe("nats-tls");
    }
  }

  // Monitoring: each ServiceMonitor selects a Service whose port it names; together they cover the four processes.
  const monitoredWorkloads = new Set<string>();
  for (const monitor of objects.filter((o) => o.kind === "ServiceMonitor")) {
    const selector = specOf(monitor)["selector"]["matchLabels"] as Record<string, string>;
    const services = objects.filter((o) => o.kind === "Service" && labelsMatch(selector, (o.metadata as Spec)["labels"]));
    expect(
      services.map((s) => s.metadata.name),
      `ServiceMonitor ${monitor.metadata.name} selects one Service`,
    ).toHaveLength(1);
    const service = specOf(services[0]!);
    for (const endpoint of specOf(monitor)["endpoints"] as Spec[]) {
      expect(
        (service["ports"] as Spec[]).map((p) => p["name"]),
        `ServiceMonitor ${monitor.metadata.name} port`,
      ).toContain(endpoint["port"]);
      expect(endpoint["path"]).toBe("/metrics");
    }
    for (const o of objects)
      if (podSpecOf(o) && labelsMatch(service["selector"], specOf(o)["template"]?.["metadata"]?.["labels"]))
        monitoredWorkloads.add(o.metadata.name);
    // The public Service is never a metrics target: its port is the one the Ingress exposes.
    expect(services[0]!.metadata.name, "metrics are not scraped through the public gateway Service").not.toBe("gateway");
  }
  if (objects.some((o) => o.kind === "ServiceMonitor"))
    expect([...monitoredWorkloads].sort()).toEqual(["gateway", "hold", "ledger", "notification"]);
  for (const monitor of objects.filter((o) => o.kind === "PodMonitor")) {
    const selector = specOf(monitor)["selector"]["matchLabels"] as Record<string, string>;
    const ports = (specOf(monitor)["podMetricsEndpoints"] as Spec[]).map((e) => e["port"]);
    if (selector["cnpg.io/cluster"] !== undefined) {
      // CNPG labels its instance pods with the Cluster's name and names their metrics port `metrics`.
      expect(selector["cnpg.io/cluster"]).toBe(cluster.metadata.name);
      expect(ports).toEqual(["metrics"]);
      continue;
    }
    const workload = objects.find((o) => podSpecOf(o) && labelsMatch(selector, specOf(o)["template"]?.["metadata"]?.["labels"]));
    expect(workload, `PodMonitor ${monitor.metadata.name} selects pods`).toBeDefined();
    const podPorts = podSpecOf(workload!)!.containers.flatMap((c) => (c.ports ?? []).map((p) => p.name));
    for (const port of ports) expect(podPorts, `PodMonitor ${monitor.metadata.name} port`).toContain(port);
  }
  if (objects.some((o) => o.kind === "PodMonitor")) {
    expect(
      objects
        .filter((o) => o.kind === "PodMonitor")
        .map((o) => o.metadata.name)
        .sort(),
    ).toEqual(["ledger-postgres", "nats"]);
  }

  // Backups: each Cluster archives through the plugin to an ObjectStore of its own, whose credentials
  // are the documented Secret, and has one daily ScheduledBackup; when a render backs up any Cluster,
  // it backs up every one (a restore needs the holds and the webhooks with the ledger).
  const scheduled = objects.filter((o) => o.kind === "ScheduledBackup");
  const stores = objects.filter((o) => o.kind === "ObjectStore");
  if (scheduled.length === 0 && stores.length === 0) return;
  const clusters = objects.filter((o) => o.kind === "Cluster");
  expect(clusters.map((c) => c.metadata.name)).toContain(cluster.metadata.name);
  const storeNames: string[] = [];
  for (const each of clusters) {
    const plugin = (specOf(each)["plugins"] as Spec[] | undefined)?.find((p) => p["isWALArchiver"] === true);
    expect(plugin, `Cluster ${each.metadata.name} archives WAL through a plugin`).toBeDefined();
    const storeName = plugin!["parameters"]["barmanObjectName"] as string;
    storeNames.push(storeName);
    const store = named("ObjectStore", storeName);
    expect(store, `Cluster ${each.metadata.name}'s ObjectStore`).toBeDefined();
    const configuration = specOf(store!)["configuration"] as Spec;
    expect(configuration["destinationPath"]).toMatch(/^(s3|gs):\/\/|^https:\/\//);
    const example = exampleSecrets.find((s) => s.metadata.name === configuration["s3Credentials"]["accessKeyId"]["name"]);
    expect(example, "the object store's Secret has a documented example").toBeDefined();
    for (const ref of Object.values(configuration["s3Credentials"] as Record<string, { name: string; key: string }>)) {
      expect(ref.name).toBe(example!.metadata.name);
      expect(Object.keys(example!["stringData"] as object)).toContain(ref.key);
    }
    const backups = scheduled.filter((b) => specOf(b)["cluster"]["name"] === each.metadata.name);
    expect(backups, `Cluster ${each.metadata.name} has one ScheduledBackup`).toHaveLength(1);
    const backup = specOf(backups[0]!);
    expect(backup["schedule"].split(" "), "CNPG schedules have six fields, seconds first").toHaveLength(6);
    expect(backup["method"]).toBe("plugin");
    expect(backup["pluginConfiguration"]["name"]).toBe(plugin!["name"]);
  }
  // One path per cluster: two clusters archiving to one place would mix their WAL.
  expect(new Set(storeNames).size).toBe(clusters.length);
  const paths = storeNames.map((name) => specOf(named("ObjectStore", name)!)["configuration"]["destinationPath"]);
  expect(new Set(paths).size).toBe(clusters.length);
  expect(scheduled).toHaveLength(clusters.length);
  expect(stores).toHaveLength(clusters.length);
}

/** Every `*.example.yaml` under deploy/: Secrets shown, never applied. */
const exampleSecrets = yamlFiles(DEPLOY)
  .filter((f) => f.endsWith(".example.yaml"))
  .flatMap(parseFile);

/** A component's own objects and the patches it applies to Clusters, merged by hand (no kubectl needed). */
function withComponents(base: Obj[], components: string[]): Obj[] {
  const objects = base.map((o) => structuredClone(o));
  for (const dir of components) {
    const component = parseFile(join(DEPLOY, "components", dir, "kustomization.yaml"))[0] as unknown as {
      resources?: string[];
      patches?: { path: string }[];
    };
    objects.push(...(component.resources ?? []).flatMap((r) => parseFile(join(DEPLOY, "components", dir, r))));
    for (const { path } of component.patches ?? []) {
      for (const patch of parseFile(join(DEPLOY, "components", dir, path))) {
        const target = objects.find((o) => o.kind === patch.kind && o.metadata.name === patch.metadata.name);
        expect(target, `${dir}/${path} patches an object of base`).toBeDefined();
        Object.assign(specOf(target!), specOf(patch));
      }
    }
  }
  return objects;
}

const envNames = codeEnvNames();

describe("deploy/base", () => {
  const kustomization = parseFile(join(DEPLOY, "base/kustomization.yaml"))[0] as unknown as { resources: string[] };
  const objects = kustomization.resources.flatMap((r) => parseFile(join(DEPLOY, "base", r)));

  it("lists every manifest file except the secret example", () => {
    const files = readdirSync(join(DEPLOY, "base")).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
    expect(new Set(kustomization.resources)).toEqual(new Set(files.filter((f) => !f.endsWith(".example.yaml"))));
  });

  it("runs without replicas on HPA-managed Deployments, a pinned Postgres, and NATS with a password and TLS", () => {
    checkOperations(objects, exampleSecrets);
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
      const target = objects.find((o) => podSpecOf(o) && labelsMatch(spec.selector, specOf(o)["template"]?.["metadata"]?.["labels"]));
      expect(target, `Service ${svc.metadata.name} selects a workload`).toBeDefined();
      const portNames = podSpecOf(target!)!.containers.flatMap((c) => (c.ports ?? []).map((p) => p.name));
      for (const p of spec.ports) expect(portNames, `Service ${svc.metadata.name} targetPort`).toContain(p.targetPort);
    }
  });

  it("references secrets and ships only examples, with no real value", () => {
    expect(exampleSecrets.map((s) => s.metadata.name).sort()).toEqual(["ledger-backup-s3", "ledger-secrets"]);
    for (const example of exampleSecrets) {
      expect(example.kind).toBe("Secret");
      for (const v of Object.values(example["stringData"] as Record<string, string>)) expect(v).toMatch(/^REPLACE_WITH_/);
    }
    expect(objects.some((o) => o.kind === "Secret")).toBe(false);
    // Every key a workload reads from ledger-secrets is in its example.
    const keys = Object.keys(exampleSecrets.find((s) => s.metadata.name === "ledger-secrets")!["stringData"] as object);
    for (const o of objects) {
      for (const c of podSpecOf(o)?.containers ?? []) {
        for (const e of c.env ?? []) {
          const ref = (e.valueFrom as { secretKeyRef?: { name: string; key: string } } | undefined)?.secretKeyRef;
          if (ref?.name === "ledger-secrets") expect(keys, `${o.metadata.name} ${e.name}`).toContain(ref.key);
        }
      }
    }
  });

  it("lets only the gateway's public port take traffic from outside", () => {
    const policies = objects.filter((o) => o.kind === "NetworkPolicy");
    expect(policies.some((p) => p.metadata.name === "default-deny")).toBe(true);
    for (const p of policies) {
      const ingress = (specOf(p)["ingress"] ?? []) as { from?: unknown[]; ports?: { port: number }[] }[];
      for (const rule of ingress.filter((r) => !r.from || r.from.length === 0)) {
        expect(p.metadata.name, "only the gateway policy has an ingress rule without `from`").toBe("gateway");
        // The ops port (/metrics, /readyz) is not among the open ones.
        expect(rule.ports?.map((port) => port.port)).toEqual([8080]);
      }
    }
  });

  it("runs NATS as a three-node JetStream cluster with a route to each node", () => {
    const sts = objects.find((o) => o.kind === "StatefulSet" && o.metadata.name === "nats")!;
    expect(specOf(sts)["replicas"]).toBe(3);
    const conf = (objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === "nats-config")!["data"] as Record<string, string>)[
      "nats.conf"
    ];
    expect(conf).toMatch(/jetstream\s*\{[^}]*store_dir/);
    for (const i of [0, 1, 2]) expect(conf).toContain(`nats://nats-${i}.nats-headless:6222`);
  });

  it("gives the ledger and the notification service a smaller young generation still, on their command lines", () => {
    for (const name of ["ledger", "notification"]) {
      const deployment = objects.find((o) => o.kind === "Deployment" && o.metadata.name === name)!;
      expect(podSpecOf(deployment)!.containers[0]!.command).toEqual([
        "node",
        "--max-semi-space-size=4",
        "--no-allocation-site-pretenuring",
        `dist/${name}.js`,
      ]);
    }
  });

  it("starts every service with allocation-site pretenuring off", () => {
    for (const name of ["ledger", "hold", "notification", "gateway"]) {
      const deployment = objects.find((o) => o.kind === "Deployment" && o.metadata.name === name)!;
      const command = podSpecOf(deployment)!.containers[0]!.command as string[];
      expect(command[0]).toBe("node");
      expect(command.slice(1, -1)).toContain("--no-allocation-site-pretenuring");
      expect(command.at(-1)).toBe(`dist/${name}.js`);
    }
  });
});

describe("deploy/components", () => {
  const base = (parseFile(join(DEPLOY, "base/kustomization.yaml"))[0] as unknown as { resources: string[] }).resources.flatMap((r) =>
    parseFile(join(DEPLOY, "base", r)),
  );

  it("lists every manifest file of each component except the secret example", () => {
    for (const dir of readdirSync(join(DEPLOY, "components"))) {
      const component = parseFile(join(DEPLOY, "components", dir, "kustomization.yaml"))[0] as unknown as {
        kind: string;
        resources?: string[];
        patches?: { path: string }[];
      };
      expect(component.kind).toBe("Component");
      const listed = [...(component.resources ?? []), ...(component.patches ?? []).map((p) => p.path)];
      const files = readdirSync(join(DEPLOY, "components", dir)).filter(
        (f) => f.endsWith(".yaml") && f !== "kustomization.yaml" && !f.endsWith(".example.yaml"),
      );
      expect(new Set(listed), dir).toEqual(new Set(files));
    }
  });

  it("backup and monitoring name only Clusters, Secrets, Services, ports and pods that exist", async () => {
    const objects = withComponents(base, ["backup", "monitoring"]);
    for (const obj of objects) await validateAgainstSchema(obj, false);
    checkOperations(objects, exampleSecrets);
    expect(objects.filter((o) => o.kind === "ServiceMonitor")).toHaveLength(4);
    expect(objects.filter((o) => o.kind === "ScheduledBackup")).toHaveLength(1);
  });
});

describe("deploy/overlays", () => {
  for (const overlay of ["dev", "prod"]) {
    it(`${overlay}: every file parses and validates as a patch`, async () => {
      for (const file of yamlFiles(join(DEPLOY, "overlays", overlay))) {
        for (const obj of parseFile(file)) {
          await validateAgainstSchema(obj, true);
          // A Deployment an HPA manages takes its count from the HPA, in overlays too.
          if (obj.kind === "Deployment")
            expect(specOf(obj)["replicas"], `${file}: Deployment ${obj.metadata.name} replicas`).toBeUndefined();
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
      checkOperations(objects, exampleSecrets);
      expect(objects.filter((o) => o.kind === "Deployment")).toHaveLength(4);
      if (overlay === "prod") {
        expect(objects.filter((o) => o.kind === "ServiceMonitor")).toHaveLength(4);
        expect(objects.filter((o) => o.kind === "ScheduledBackup")).toHaveLength(3);
      }
    });
  }
});

describe("Dockerfile", () => {
  const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");
  // The runtime stage: what comes after the last FROM.
  const runtime = dockerfile.slice(dockerfile.lastIndexOf("\nFROM "));

  it("copies every workspace package's package.json, so --frozen-lockfile can install", () => {
    const workspace = parseAllDocuments(readFileSync(join(ROOT, "pnpm-workspace.yaml"), "utf8"))[0]!.toJS() as { packages: string[] };
    const dirs = workspace.packages.flatMap((p) =>
      p.endsWith("/*")
        ? readdirSync(join(ROOT, p.slice(0, -2)), { withFileTypes: true })
            .filter((e) => e.isDirectory())
            .map((e) => `${p.slice(0, -2)}/${e.name}`)
        : [p],
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

  it("runs compiled JavaScript on production dependencies only, with no TypeScript loader", () => {
    expect(dockerfile).toContain("node scripts/build.mjs");
    expect(dockerfile).toMatch(/^RUN pnpm install --frozen-lockfile --prod --filter "@ledger\/gateway\.\.\." /m);
    // The runtime stage takes node_modules from the production install, never from the full one.
    expect(runtime).toMatch(/COPY --from=prod-deps [^\n]* \/app \/app/);
    expect(runtime).not.toMatch(/COPY --from=(deps|build) [^\n]* \/app \/app\n/);
    expect(runtime).not.toMatch(/tsx|--import/);
    expect(runtime).toMatch(/^CMD \["node", "--no-allocation-site-pretenuring", "dist\/ledger\.js"\]$/m);
  });

  it("caps glibc's malloc arenas for every process of the image", () => {
    expect(runtime).toMatch(/^ENV MALLOC_ARENA_MAX=2$/m);
  });

  it("maps large malloc blocks on their own for every process of the image, as npm start does", () => {
    expect(runtime).toMatch(/^ENV MALLOC_MMAP_THRESHOLD_=131072$/m);
    expect(readFileSync(join(ROOT, "package.json"), "utf8")).toContain(`MALLOC_MMAP_THRESHOLD_=\${MALLOC_MMAP_THRESHOLD_:-131072}`);
  });

  it("gives every process of the image a smaller young generation and a heap limit under the pods' memory, and nothing else through NODE_OPTIONS", () => {
    expect(runtime.match(/^ENV NODE_OPTIONS=.*$/gm)).toEqual(['ENV NODE_OPTIONS="--max-semi-space-size=8 --max-old-space-size=384"']);
  });
});
