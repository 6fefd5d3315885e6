// Prints what V8 promotes into its old generation per postgres.js query of 1,000 rows, read one
// after another the way a service reads them and dropped once read. A driver that lets a finished
// query go promotes next to nothing; one whose settled queries stay reachable across young-generation
// collections promotes a quarter of what each query allocates
// (docs/decisions/settled-queries-released.md). Run it after any postgres.js or Node upgrade:
//
//   node --trace-gc-nvp scripts/driver-promotion.mjs | node scripts/driver-promotion.mjs --summary
//
// DATABASE_URL defaults to the local server the tests use. `driver-promotion.test.ts` runs it too.
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

export const QUERIES = 300;

/** Sums V8's `--trace-gc-nvp` lines printed between the loop's two markers. */
export function summarizeGcTrace(lines) {
  let measuring = false;
  const total = { collections: 0, full: 0, allocated: 0, promoted: 0, pause: 0 };
  for (const line of lines) {
    if (line.startsWith("MEASURE start")) measuring = true;
    else if (line.startsWith("MEASURE end")) measuring = false;
    else if (measuring && line.includes("pause=")) {
      const field = (name) => Number(new RegExp(`\\b${name}=([\\d.]+)`).exec(line)?.[1] ?? 0);
      total.collections++;
      if (/\bgc=m[cs]\b/.test(line)) total.full++;
      total.allocated += field("allocated");
      total.promoted += field("promoted");
      total.pause += field("pause");
    }
  }
  return total;
}

async function readInALoop() {
  const { default: postgres } = await import("postgres");
  const sql = postgres(process.env.DATABASE_URL ?? "postgres://root@127.0.0.1:5432/postgres", { max: 1 });
  const read = async () => {
    const rows = await sql`select g as id, 'entry number ' || g as description, (g * 7)::int8 as amount
      from generate_series(1, 1000) g`;
    return rows.length;
  };
  for (let i = 0; i < 50; i++) await read(); // warm up: the statement prepared, the code optimised
  console.log("MEASURE start");
  for (let i = 0; i < QUERIES; i++) await read();
  console.log("MEASURE end");
  await sql.end();
}

async function printSummary() {
  const lines = [];
  for await (const line of createInterface({ input: process.stdin })) lines.push(line);
  const total = summarizeGcTrace(lines);
  const perQuery = (bytes) => `${(bytes / QUERIES / 1024).toFixed(1)} KiB`;
  console.log(
    `${QUERIES} queries: ${total.collections} collections (${total.full} full); per query ` +
      `${perQuery(total.allocated)} allocated, ${perQuery(total.promoted)} promoted ` +
      `(${((100 * total.promoted) / Math.max(total.allocated, 1)).toFixed(1)}%), ` +
      `${(total.pause / QUERIES).toFixed(3)} ms of pauses`,
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await (process.argv.includes("--summary") ? printSummary() : readInALoop());
}
