import { create } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { isoMicros } from "@ledger/common";
import { DirectionSchema, GetEntityStatementResponseSchema, type GetEntityStatementResponse } from "@ledger/proto/ledger/v1/ledger_pb.js";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { toJson } from "./json.js";
import { enumWord, renderPage, renderStatement } from "./render.js";

// renderStatement writes a page's entries straight into JSON text instead of an object per entry
// for toJson: the text must be exactly what toJson wrote for those objects, whatever the entries
// hold (any description, amounts across the int64 range, moments sharing a second or not).
describe("renderStatement", () => {
  /** The page as toJson wrote it when each entry was an object. */
  function asObjects(res: GetEntityStatementResponse): string {
    const s = res.statement!;
    return toJson({
      statement: {
        entity_id: s.entityId,
        currency_code: s.currencyCode,
        from: s.from ? isoMicros(s.from) : null,
        to: s.to ? isoMicros(s.to) : null,
        opening_posted: s.openingPosted,
        closing_posted: s.closingPosted,
      },
      entries: res.entries.map((e) => ({
        transaction_id: e.transactionId,
        transaction_group_id: e.transactionGroupId,
        direction: enumWord(DirectionSchema, e.direction),
        amount: e.amount,
        description: e.description,
        posted_at: e.postedAt ? isoMicros(e.postedAt) : null,
        posted_after: e.postedAfter,
      })),
      pagination: renderPage(res.page),
    });
  }

  const int64 = fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n });
  // Seconds from year 1 to 9999, often the same second as a neighbour's.
  const seconds = fc.oneof(fc.bigInt({ min: -62_135_596_800n, max: 253_402_300_799n }), fc.constantFrom(1_795_879_884n, 1_795_879_885n));
  const entry = fc.record({
    transactionId: fc.string(),
    transactionGroupId: fc.string(),
    direction: fc.integer({ min: 0, max: 3 }),
    amount: int64,
    description: fc.string({ unit: "binary" }),
    postedAt: fc.option(
      fc.record({ seconds, nanos: fc.integer({ min: 0, max: 999_999 }).map((us) => us * 1000) }).map((t) => create(TimestampSchema, t)),
      { nil: undefined },
    ),
    postedAfter: int64,
  });

  it("writes the text toJson wrote for an object per entry", () => {
    fc.assert(
      fc.property(fc.array(entry, { maxLength: 30 }), int64, fc.boolean(), (entries, opening, hasNext) => {
        const res = create(GetEntityStatementResponseSchema, {
          statement: {
            entityId: "ent_1",
            currencyCode: "USD",
            from: create(TimestampSchema, { seconds: 0n, nanos: 1000 }),
            to: create(TimestampSchema, { seconds: 1_795_879_885n, nanos: 0 }),
            openingPosted: opening,
            closingPosted: -opening,
          },
          entries,
          page: { limit: 30, hasNext, nextCursor: hasNext ? "next" : "" },
        });
        const text = toJson(renderStatement(res));
        expect(text).toBe(asObjects(res));
        expect(() => JSON.parse(text)).not.toThrow();
      }),
      { numRuns: 300 },
    );
  });

  it("writes an empty page's entries as an empty array", () => {
    const res = create(GetEntityStatementResponseSchema, { statement: { entityId: "ent_1", currencyCode: "EUR" } });
    expect(JSON.parse(toJson(renderStatement(res)))).toMatchObject({ entries: [], pagination: { has_next: false } });
  });
});
