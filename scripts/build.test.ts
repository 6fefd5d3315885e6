import { describe, expect, it } from "vitest";
import { asciiSource } from "./build.mjs";

// The build escapes what esbuild leaves non-ASCII, where an escape means the same thing.
describe("asciiSource", () => {
  it("escapes comments and regular expressions, which then match as before", () => {
    const source = ["/**", " * a copy — not shared", " */", "const re = /(\\d+)(ns|µs|ms)/g;", "// ok — done"].join("\n");
    const out = asciiSource(source);
    expect(out).not.toMatch(/[\u0080-\uffff]/);
    expect(out).toContain(" * a copy \\u2014 not shared");
    const re = new Function(`${out.split("\n")[3]} return re;`)() as RegExp;
    expect("5µs".match(re)).toEqual(["5µs"]);
  });

  it("leaves a line with a template alone: a tagged template's raw text would change", () => {
    const line = "const s = String.raw`µ`; const r = /µ/;";
    expect(asciiSource(line)).toBe(line);
  });

  it("leaves ASCII text as it is", () => {
    const source = "const a = 1;\n// plain\n";
    expect(asciiSource(source)).toBe(source);
  });
});
