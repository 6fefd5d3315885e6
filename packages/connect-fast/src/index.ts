// The public surface of @ledger/connect-fast (README.md): unary Connect calls without Connect-ES's
// per-call layers, and the one switch that turns them off. Nothing else in the repository imports
// a Connect name Connect does not document as public (scripts/connect-private.test.ts).
export { UNARY_FAST_PATH_VARIABLE, UnaryFastPathSwitchError, unaryFastPathEnabled } from "./switch.js";
export { createUnaryFastPath, type UnaryFastPath, type UnaryFastPathOptions } from "./unary-fast-path.js";
export { inProcessService, type InProcessOptions, type InProcessService } from "./in-process.js";
export { createHttp2Transport, type Http2TransportOptions } from "./http2-transport.js";
