// The whole system as tests and the benchmark see it: stacks started in-process, the REST client,
// the events a stack published, the invariants checked after a run, and (startHandlers) the
// gateway in front of every service's handlers in memory, for refusals that need no database.
// Generic helpers that depend on no service (receivers, own NATS, the browser) are in @ledger/testing.
export { schemaClient, setDefaultWiring, startStack, TEST_SERVICE_TOKEN, type Stack, type StackOptions } from "./stack.js";
export { restClient, type Api, type ApiResponse } from "./rest-client.js";
export { deleteStream, deleteStreamsStartingWith, readStream, type StoredEvent } from "./events.js";
export { expectHeldMatches, ledgerViolations } from "./invariants.js";
export { refusalHandlers, startHandlers, type Handlers } from "./handlers.js";
