import { describe, expect, it } from "vitest";
import { UnaryFastPathSwitchError, unaryFastPathEnabled } from "./switch.js";

describe("RPC_UNARY_FAST_PATH", () => {
  it("is on unless it says false", () => {
    for (const value of [undefined, "", "true", "1", "yes", " TRUE "]) {
      expect(unaryFastPathEnabled({ RPC_UNARY_FAST_PATH: value }), String(value)).toBe(true);
    }
    for (const value of ["false", "0", "no", "False"]) expect(unaryFastPathEnabled({ RPC_UNARY_FAST_PATH: value }), value).toBe(false);
  });

  it("refuses any other value, naming the variable", () => {
    expect(() => unaryFastPathEnabled({ RPC_UNARY_FAST_PATH: "off" })).toThrow(UnaryFastPathSwitchError);
    expect(() => unaryFastPathEnabled({ RPC_UNARY_FAST_PATH: "off" })).toThrow('RPC_UNARY_FAST_PATH must be true or false, got "off"');
  });
});
