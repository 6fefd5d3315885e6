// Prints the run's totals as one plain closing line ("N passed, N failed, N skipped") from
// vitest's JSON report, so CI logs end with a line any reader understands.
import { readFileSync } from "node:fs";

const report = JSON.parse(readFileSync(process.argv[2], "utf8"));
const skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);
console.log(`Tests: ${report.numPassedTests} passed, ${report.numFailedTests} failed, ${skipped} skipped`);
if (report.numTotalTests === 0) {
  console.error("no test ran");
  process.exit(1);
}
