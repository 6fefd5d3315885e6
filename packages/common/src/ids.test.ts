import { describe, expect, it } from "vitest";
import { isId, newId } from "./ids.js";
import { encodeCursor, parsePageRequest, toPage } from "./pagination.js";

describe("ids", () => {
  it("carries the kind's prefix and sorts by creation time", async () => {
    const first = newId("entity");
    await new Promise((resolve) => setTimeout(resolve, 3));
    const second = newId("entity");
    expect(first).toMatch(/^ent_[0-9a-hjkmnp-tv-z]{26}$/);
    expect(first < second).toBe(true);
    expect(newId("group")).toMatch(/^trx-grp_/);
  });

  it("never repeats within the same millisecond", () => {
    const ids = new Set(Array.from({ length: 10_000 }, () => newId("leg")));
    expect(ids.size).toBe(10_000);
  });

  it("recognises only well-formed ids of the right kind", () => {
    const id = newId("entity");
    expect(isId("entity", id)).toBe(true);
    expect(isId("leg", id)).toBe(false);
    expect(isId("entity", id + "x")).toBe(false);
    expect(isId("entity", "ent_" + "u".repeat(26))).toBe(false);
  });
});

describe("pagination", () => {
  const valid = (id: string) => isId("entity", id);

  it("defaults the page size and refuses sizes outside 1 to 100", () => {
    expect(parsePageRequest(0, "", valid)).toEqual({ limit: 20 });
    expect(() => parsePageRequest(101, "", valid)).toThrow(/limit/);
    expect(() => parsePageRequest(-1, "", valid)).toThrow(/limit/);
  });

  it("round-trips a cursor and refuses forged ones", () => {
    const id = newId("entity");
    expect(parsePageRequest(5, encodeCursor(id), valid)).toEqual({ limit: 5, before: id });
    expect(() => parsePageRequest(5, encodeCursor("ent_bad"), valid)).toThrow(/cursor/);
    expect(() => parsePageRequest(5, "%%%", valid)).toThrow(/cursor/);
    expect(() => parsePageRequest(5, Buffer.from("[]").toString("base64url"), valid)).toThrow(/cursor/);
  });

  it("uses the extra row only to tell that a next page exists", () => {
    const rows = ["c", "b", "a"];
    expect(toPage(rows, { limit: 2 }, (r) => r)).toEqual({
      items: ["c", "b"],
      page: { limit: 2, hasNext: true, nextCursor: encodeCursor("b") },
    });
    expect(toPage(rows, { limit: 3 }, (r) => r).page).toEqual({ limit: 3, hasNext: false, nextCursor: "" });
  });
});
