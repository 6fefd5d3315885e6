// Prints the run's totals as one plain closing line ("N passed, N failed, N skipped") from
// vitest's JSON report, and, above it, every failed test with the first lines of its failure,
// so the end of a CI log says what broke without scrolling back through the whole run.
import { existsSync, readFileSync } from "node:fs";
import { relative } from "node:path";

if (!existsSync(process.argv[2]) || readFileSync(process.argv[2], "utf8").trim() === "") {
  console.log("Tests: no report: the run ended before vitest wrote one (see the lines above it)");
  process.exit(1);
}
const report = JSON.parse(readFileSync(process.argv[2], "utf8"));
const skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);

for (const file of report.testResults ?? []) {
  const where = relative(process.cwd(), file.name);
  const failed = (file.assertionResults ?? []).filter((test) => test.status === "failed");
  // A file that failed before any test ran (a broken import, a failing hook) has no failed test.
  if (failed.length === 0 && file.status === "failed") {
    console.log(`FAILED ${where}: ${firstLines(file.message)}`);
  }
  for (const test of failed) {
    console.log(`FAILED ${where} > ${test.fullName}`);
    for (const message of test.failureMessages ?? []) console.log(`    ${firstLines(message)}`);
  }
}

console.log(`Tests: ${report.numPassedTests} passed, ${report.numFailedTests} failed, ${skipped} skipped`);
if (report.numTotalTests === 0) {
  console.error("no test ran");
  process.exit(1);
}

function firstLines(text = "", count = 4) {
  return text.split("\n").slice(0, count).join("\n    ");
}
