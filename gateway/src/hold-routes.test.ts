import { create } from "@bufbuild/protobuf";
import { HoldReleaseReason, HoldSchema, HoldStatus } from "@ledger/proto/hold/v1/hold_pb.js";
import { describe, expect, it } from "vitest";
import { renderHold } from "./hold-routes.js";

// Hold.release_reason is an enum beside the deprecated string; an answer stored for idempotent
// replay by the previous version has only the string (docs/operations.md#upgrade-notes).
describe("renderHold release_reason", () => {
  it("reads the enum", () => {
    const hold = create(HoldSchema, {
      status: HoldStatus.RELEASED,
      holdReleaseReason: HoldReleaseReason.EXPIRED,
      releaseReason: "expired",
    });
    expect(renderHold(hold).release_reason).toBe("expired");
  });

  it("falls back to the string of an answer stored by the previous version", () => {
    const hold = create(HoldSchema, { status: HoldStatus.RELEASED, releaseReason: "requested" });
    expect(renderHold(hold).release_reason).toBe("requested");
  });

  it("is null for a hold that was not released", () => {
    expect(renderHold(create(HoldSchema, { status: HoldStatus.HELD })).release_reason).toBeNull();
  });
});
