// Types of scripts/driver-promotion.mjs, plain JavaScript so that it runs with node alone.
/** Queries the measured loop reads. */
export declare const QUERIES: number;
/** What V8's `--trace-gc-nvp` lines between the loop's markers add up to (bytes and milliseconds). */
export declare function summarizeGcTrace(lines: Iterable<string>): {
  collections: number;
  full: number;
  allocated: number;
  promoted: number;
  pause: number;
};
