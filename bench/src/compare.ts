// `pnpm bench:compare --ref <git-ref> [bench options]`: prices a change. Runs the same bench cells on
// another revision and on this checkout, in turn (ref, this, ref, this, ...), each run with its own
// pgbench reference, and prints every cell's `x pgbench` for both with the change between the medians,
// then every cell's p50, p99 and the services' CPU per call (what prices a read's latency).
// Alternating runs spread the machine's drift over both sides; the spread of the rounds says how far
// the difference can be trusted (bench/README.md#pricing-a-change).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const USAGE = `usage: pnpm bench:compare --ref REF [--rounds N] [bench options, e.g. --only pgbench,transfer,batch --layout one-process]

  --ref REF      the git revision to compare against (a branch, tag or commit of this repository)
  --rounds N     runs of each side, alternating (default 2)

The other revision is checked out once into a git worktree beside the system's temporary files and
installed from pnpm's store; both sides use BENCH_DATABASE_URL in turn.`;

interface Cell {
  layout: string;
  workload: string;
  transport: string;
  concurrency: number;
  ratio: number;
  perSecond: number;
  p50: number;
  p99: number;
  cpu: Record<string, number>;
  errors: Record<string, number>;
}

const root = fileURLToPath(new URL("../..", import.meta.url));

function main(): void {
  const { values, tokens } = parseArgs({
    options: { ref: { type: "string" }, rounds: { type: "string" }, help: { type: "boolean" } },
    strict: false,
    tokens: true,
  });
  if (values.help || typeof values.ref !== "string") {
    console.log(USAGE);
    process.exit(values.help ? 0 : 2);
  }
  const rounds = Number(values.rounds ?? 2);
  if (!Number.isInteger(rounds) || rounds < 1 || rounds > 10) throw new Error("--rounds is a whole number from 1 to 10");
  const benchArgs = passThrough(tokens ?? []);
  if (benchArgs.includes("--smoke")) throw new Error("--smoke numbers mean nothing; compare full cells (shorten them with --duration)");

  const sha = git(["rev-parse", "--verify", `${values.ref}^{commit}`]).trim();
  const other = prepareWorktree(sha);
  const sides = [
    { name: `${values.ref} (${sha.slice(0, 9)})`, dir: other },
    { name: "this checkout", dir: root },
  ];
  const runs: Cell[][][] = sides.map(() => []);
  for (let round = 1; round <= rounds; round++) {
    sides.forEach((side, i) => {
      console.log(`\n== round ${round}/${rounds}: ${side.name}`);
      runs[i]?.push(runBench(side.dir, benchArgs));
    });
  }
  const names = sides.map((s) => s.name);
  console.log(`\n${table(names, runs)}\n\n${latencyTable(names, runs)}`);
}

/** Every argument but --ref and --rounds, for `pnpm bench` itself. */
function passThrough(tokens: ReturnType<typeof parseArgs>["tokens"] & object): string[] {
  const out: string[] = [];
  for (const t of tokens) {
    if (t.kind === "option" && (t.name === "ref" || t.name === "rounds")) continue;
    if (t.kind === "option") out.push(t.rawName, ...(t.value === undefined ? [] : [t.value]));
    else if (t.kind === "positional") out.push(t.value);
  }
  return out;
}

function git(args: string[]): string {
  return execFileSync("git", args, { cwd: root, encoding: "utf8" });
}

/** A worktree of `sha` with its dependencies installed; reused when it is already there. */
function prepareWorktree(sha: string): string {
  const dir = join(process.env["TMPDIR"] ?? "/tmp", `ledger-bench-${sha.slice(0, 12)}`);
  if (!existsSync(join(dir, ".git"))) {
    console.log(`checking out ${sha.slice(0, 12)} into ${dir}`);
    git(["worktree", "add", "--detach", dir, sha]);
  }
  if (!existsSync(join(dir, "node_modules", ".modules.yaml"))) {
    console.log(`installing ${dir}'s dependencies from pnpm's store`);
    execFileSync("pnpm", ["install", "--frozen-lockfile", "--prefer-offline"], { cwd: dir, stdio: "inherit" });
  }
  return dir;
}

/** One full `pnpm bench` in `dir` with `args`; answers its cells. A failed run stops the comparison. */
function runBench(dir: string, args: string[]): Cell[] {
  const run = spawnSync("pnpm", ["-s", "bench", ...args], { cwd: dir, stdio: "inherit" });
  if (run.status !== 0) throw new Error(`pnpm bench in ${dir} exited ${run.status}`);
  const report = JSON.parse(readFileSync(join(dir, "bench", "results", "latest.json"), "utf8")) as { cells: Cell[] };
  return report.cells;
}

const cellKey = (c: Cell) => `${c.layout} | ${c.workload} | ${c.transport} | ${c.concurrency}`;

/**
 * The services' CPU per call (ms): the ledger's and the gateway's processes (the one process's,
 * counted once, in its layout); Postgres is left out, as its processes serve the whole machine.
 */
function serviceCpuMs(c: Cell): number {
  const percent = c.layout === "one-process" ? (c.cpu["ledger"] ?? 0) : (c.cpu["ledger"] ?? 0) + (c.cpu["gateway"] ?? 0);
  return c.perSecond > 0 ? (percent * 10) / c.perSecond : 0;
}

/**
 * A Markdown table: per cell, the medians over the rounds of each side's p50, p99 and services'
 * CPU per call, and their change: what prices a change to a read's latency (the history and
 * search cells, which have no pgbench ratio).
 */
function latencyTable(names: string[], runs: Cell[][][]): string {
  const keys = [...new Set(runs.flat(2).map(cellKey))];
  const lines = [
    `| layout | workload | via | conc | measure | ${names[0]} (rounds) | ${names[1]} (rounds) | change of medians |`,
    "|---|---|---|---:|---|---|---|---:|",
  ];
  const measures: Array<[string, (c: Cell) => number]> = [
    ["p50 ms", (c) => c.p50],
    ["p99 ms", (c) => c.p99],
    ["service CPU ms/call", serviceCpuMs],
  ];
  for (const k of keys) {
    for (const [measure, of] of measures) {
      const values = (side: number) =>
        (runs[side] ?? []).map((cells) => cells.find((c) => cellKey(c) === k)).flatMap((c) => (c ? [of(c)] : []));
      const [a, b] = [values(0), values(1)];
      const change = a.length && b.length && median(a) > 0 ? `${((median(b) / median(a) - 1) * 100).toFixed(1)}%` : "n/a";
      const show = (xs: number[]) => (xs.length ? `${median(xs).toFixed(1)} (${xs.map((x) => x.toFixed(1)).join(", ")})` : "");
      lines.push(`| ${k} | ${measure} | ${show(a)} | ${show(b)} | ${change} |`);
    }
  }
  return lines.join("\n");
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] ?? 0) : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2;
}

/** A Markdown table: per cell, each side's `x pgbench` in every round, and the change of the medians. */
function table(names: string[], runs: Cell[][][]): string {
  const keys = [...new Set(runs.flat(2).map(cellKey))];
  const ratios = (side: number, k: string) =>
    (runs[side] ?? []).map((cells) => cells.find((c) => cellKey(c) === k)?.ratio).filter((r) => r !== undefined);
  const lines = [`| layout | workload | via | conc | ${names[0]} | ${names[1]} | change of medians |`, "|---|---|---|---:|---|---|---:|"];
  for (const k of keys) {
    const [a, b] = [ratios(0, k), ratios(1, k)];
    const change = a.length && b.length ? `${((median(b) / median(a) - 1) * 100).toFixed(1)}%` : "n/a";
    const show = (xs: number[]) => xs.map((x) => x.toFixed(3)).join(", ");
    lines.push(`| ${k} | ${show(a)} | ${show(b)} | ${change} |`);
  }
  return lines.join("\n");
}

main();
