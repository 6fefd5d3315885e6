import { afterEach, expect, it } from "vitest";
import { sentWrites } from "./db.js";

// A statement sent now and awaited with a later COMMIT can fail in between (a constraint refused
// while the caller awaits a read, a lost connection). Node ends the process on an unhandled
// rejection, so the failure must be handled the moment it is pushed and still reach its awaiter.

const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);
process.on("unhandledRejection", onUnhandled);
afterEach(() => {
  unhandled.length = 0;
});

it("keeps a write that fails before it is awaited from being an unhandled rejection", async () => {
  const writes = sentWrites();
  writes.push(Promise.reject(new Error("duplicate key")));
  // Past the tick in which Node reports unhandled rejections.
  await new Promise((resolve) => setTimeout(resolve, 20));
  expect(unhandled).toEqual([]);
  await expect(writes[0]).rejects.toThrow("duplicate key");
});

it("is a plain list otherwise: pushes keep their order and successes their values", async () => {
  const writes = sentWrites();
  expect(writes.push(Promise.resolve(1), Promise.resolve(2))).toBe(2);
  expect(await Promise.all(writes)).toEqual([1, 2]);
});
