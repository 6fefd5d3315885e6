import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";

// gateway/openapi.yaml read and parsed, for the tests and for the gateway run from source. The
// compiled gateway serves the JSON the build made from it (docs.ts) and never loads this module.

/** Where gateway/openapi.yaml lives, beside this package's src/. */
export const OPENAPI_PATH = fileURLToPath(new URL("../openapi.yaml", import.meta.url));

/** The OpenAPI document as an object (parsed from YAML). */
export function loadOpenApi(path = OPENAPI_PATH): Record<string, unknown> {
  return parse(readFileSync(path, "utf8")) as Record<string, unknown>;
}
