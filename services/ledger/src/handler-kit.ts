import type { Outbox, Sql } from "@ledger/common";
import type { createBatcher } from "./batcher.js";
import { type ProgramResolver, type Scope, scopeWith } from "./programs.js";
import { createWritePath, type WritePath } from "./write-path.js";

/** What the ledger's handlers need. */
export interface LedgerDeps {
  sql: Sql;
  outbox: Outbox;
  batcher: ReturnType<typeof createBatcher>;
  resolveProgram: ProgramResolver;
}

/** What every part of the LedgerService's handlers works with, made once for the service. */
export interface LedgerHandlerKit extends LedgerDeps, WritePath {
  /** The scope of a call's command: who asks, and in which of their programs. */
  scope: Scope;
}

/** The handlers' kit: the deps, the write path over them, and the program scope. */
export function createHandlerKit(deps: LedgerDeps): LedgerHandlerKit {
  return Object.assign({ scope: scopeWith(deps.resolveProgram) }, deps, createWritePath(deps));
}
