/**
 * Points between the hold service's own writes and its calls to the ledger where a crash is most
 * harmful. Tests set HOLD_CRASH_AT to one of them and check that a restart repairs everything.
 */
export const CRASH_POINTS = [
  "after_create_intent",
  "after_ledger_reserve",
  "after_capture_intent",
  "after_ledger_capture",
  "after_release_intent",
  "after_ledger_release",
] as const;

export type CrashPoint = (typeof CRASH_POINTS)[number];

/** Exits at once, like a SIGKILL, when `point` is the configured crash point. */
export function crashHook(configured: CrashPoint | undefined): (point: CrashPoint) => void {
  return (point) => {
    if (configured === point) {
      process.stderr.write(`hold: crashing at ${point} (HOLD_CRASH_AT)\n`);
      process.exit(137);
    }
  };
}
