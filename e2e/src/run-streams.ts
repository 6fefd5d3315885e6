import type { TestProject } from "vitest/node";
import { deleteStreamsStartingWith } from "./events.js";

/**
 * The run's second global setup (after @ledger/testing's, which names the run and its stream
 * prefix): at the end of the run it deletes the JetStream streams, with their consumers, that
 * this run's tests left on its NATS (a test that failed before closing its stack, a process
 * killed), found by the run's prefix, so a shared NATS does not collect them run after run.
 * Another run's streams, even one running beside this one, have another prefix and stay.
 */
export default function setup(project: TestProject) {
  return async () => {
    const { natsUrl, natsStreamPrefix } = project.getProvidedContext();
    const deleted = await deleteStreamsStartingWith(natsUrl, natsStreamPrefix).catch((err: unknown) => {
      console.error(`could not remove this run's streams (${natsStreamPrefix}*) from ${natsUrl}: ${(err as Error).message}`);
      return [];
    });
    if (deleted.length > 0) console.error(`removed ${deleted.length} stream(s) this run's tests left: ${deleted.join(", ")}`);
  };
}
