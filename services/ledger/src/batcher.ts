import { create, type DescMessage, type JsonObject, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import {
  claimIdempotencyKeys,
  errorCodeOf,
  createGroupScheduler,
  decodeBinary,
  encodeBinary,
  metricsRegistry,
  pipelinedTransaction,
  refusedByPostgres,
  ruleViolation,
  sentWrites,
  insertIdempotencyKeys,
  isKnownKeyError,
  settleIdempotencyKeys,
  sqlState,
  type Claim,
  type GroupCommitSettings,
  type KeyClaim,
  type Logger,
  type Outbox,
  type Sql,
  type Tx,
} from "@ledger/common";
import { Counter, Histogram } from "prom-client";
import {
  EntityCache,
  namedEntityIds,
  openBook,
  openCachedBook,
  type CachedOpenBook,
  type MoneyCommand,
  type OpenBook,
  type Outcome,
} from "./money.js";

const batchSize = new Histogram({
  name: "ledger_batch_commands",
  help: "Money commands applied per database transaction (group commit; a batch call counts its items).",
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
  registers: [metricsRegistry],
});
const batchDuration = new Histogram({
  name: "ledger_batch_seconds",
  help: "Time from a batch's start to its commit, waits for locks and round trips included.",
  buckets: [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1],
  registers: [metricsRegistry],
});
const batchFallbacks = new Counter({
  name: "ledger_batch_fallbacks_total",
  help: "Batches whose transaction failed as a whole and were retried one command at a time.",
  registers: [metricsRegistry],
});

const batchWaits = new Counter({
  name: "ledger_batch_waits_total",
  help: "Times a batch waited for another batch of this process to finish writing rows it names, to go the cached way after it.",
  registers: [metricsRegistry],
});

const batchPaths = new Counter({
  name: "ledger_batch_paths_total",
  help:
    "Batches by how they read their rows: cached (no read; one round trip), locked (read under lock first), " +
    "stale (written on cached rows that had changed: nothing written, applied again as locked), " +
    "known_key (an idempotency key existed: nothing written, applied again as locked, which replays it), " +
    "or keyed_refusal (a command with a key was refused: nothing written, applied again as locked, which claims the key first and replays an earlier success).",
  labelNames: ["path"],
  registers: [metricsRegistry],
});

/** The successful outcome of a command. */
export type Applied = Extract<Outcome, { ok: true }>;

/**
 * One money command with what is needed to answer it and to remember its key. `command` is an
 * error when the item was refused before it got here (a malformed item of a batch): it keeps its
 * place in the order and answers that error.
 */
export interface Submission<O extends DescMessage> {
  command: MoneyCommand | ConnectError;
  idempotency?: KeyClaim;
  responseSchema: O;
  /** Builds the response from the outcome; runs inside the transaction, before the key is stored. */
  respond(outcome: Applied): MessageInitShape<O>;
}

/** What the caller gets: the response, and whether it is a stored one replayed. */
export interface Answer<O extends DescMessage> {
  response: MessageShape<O>;
  replayed: boolean;
}

/** The answer of one item of a batch: its response, or why it was refused. */
export type ItemAnswer = Answer<DescMessage> | ConnectError;

/** A refused item as a batch answer carries it: the single call's error code, message and details. */
export function itemError(error: ConnectError): { code: string; message: string; details?: JsonObject } {
  const { code, details } = errorCodeOf(error);
  return { code, message: error.rawMessage, ...(details ? { details } : {}) };
}

/** A batch call: items applied in order in one transaction, answered as one response. */
export interface BatchSubmission<O extends DescMessage> {
  items: Array<Submission<DescMessage>>;
  /** All items apply or none. */
  atomic: boolean;
  /** The key of the whole call: a repeat replays the whole response. */
  idempotency?: KeyClaim;
  responseSchema: O;
  /** Builds the whole response from the items' answers; runs inside the transaction. */
  respond(answers: ItemAnswer[]): MessageInitShape<O>;
}

/** An atomic batch that applied nothing, because the item at `index` was refused with `error`. */
export class AtomicRefusal extends Error {
  constructor(
    readonly index: number,
    readonly error: ConnectError,
  ) {
    super(error.rawMessage);
  }
}

/**
 * An applied item whose response nothing inside the transaction needs (it has no key to store it
 * under): built after commit, so the row locks are not held while it is.
 */
interface LaterAnswer {
  later(): Answer<DescMessage>;
}

/**
 * What a unit of work comes to: its items' answers (some still to build after commit), a replayed
 * whole response, or an atomic refusal.
 */
type UnitResult =
  | { answers: Array<ItemAnswer | LaterAnswer>; whole?: MessageShape<DescMessage> }
  | { replay: Uint8Array }
  | { refused: AtomicRefusal }
  | { error: ConnectError };

/** The unit's answers with every response built, and a batch call's whole response. */
type FinalResult = Exclude<UnitResult, { answers: unknown }> | { answers: ItemAnswer[]; whole?: MessageShape<DescMessage> };

const isLater = (a: ItemAnswer | LaterAnswer): a is LaterAnswer => "later" in a;

/** The commands of `units`' items, in order, without the items refused before they queued. */
const commandsOf = (units: Unit[]): MoneyCommand[] =>
  units.flatMap((unit) => unit.items.flatMap((item) => (item.command instanceof ConnectError ? [] : [item.command])));

/**
 * A unit of work in the queue: one single call (one item), or one batch call (many). A unit is
 * never split: all its items go in one transaction, in order.
 */
interface Unit {
  items: Array<Submission<DescMessage>>;
  atomic: boolean;
  idempotency?: KeyClaim;
  respondWhole?: { schema: DescMessage; respond(answers: ItemAnswer[]): MessageInitShape<DescMessage> };
  /** When it was queued (performance.now()), for the linger. */
  queuedAt: number;
  /** Its idempotency keys (items' and the call's), so each key is claimed once per transaction. */
  keys: string[];
  /** Its items: what it takes of a transaction's `maxBatch`. */
  size: number;
  resolve(result: FinalResult): void;
  reject(err: unknown): void;
}

/**
 * Settings of group commit: the scheduler's (`maxBatch` counts commands, a batch call's items each,
 * and a call larger than it goes alone), and what a transaction needs.
 */
export interface BatcherOptions extends GroupCommitSettings {
  sql: Sql;
  outbox: Outbox;
  /** The NATS subject of an event type, for the outbox rows a transaction writes. */
  subjectOf: (type: string) => string;
  log: Logger;
  /** Ordinary entities kept for the cached path (docs/architecture.md#cached-balances); 0 turns it off. */
  entityCacheSize: number;
}

/** A cached book as `applyUnits` opens books: its commands are the batch's, its write goes on `on`. */
function openOn(open: CachedOpenBook, on: Sql | Tx): () => Promise<OpenBook> {
  return () => Promise.resolve({ book: open.book, write: () => open.writeOn(on) });
}

/**
 * A cached batch refused a command whose idempotency key it took as new without looking: the key
 * may hold an earlier success, which a retry must get back. Thrown before anything is written.
 */
class RefusedUnclaimedKey extends Error {
  constructor() {
    super("a keyed command was refused on the cached path; its key must be claimed first");
  }
}

const keyString = (k: { accountId: string; key: string }) => `${k.accountId}\u0000${k.key}`;

/**
 * Where a key stands while a transaction applies its commands in order: free to use (claimed new
 * for this transaction, or freed by a refusal), answered (a stored response, or one made earlier
 * in this transaction), taken by a whole batch call, or refused at its claim.
 */
type KeyState =
  | { kind: "free" }
  | { kind: "answered"; fingerprint: Buffer; response: Uint8Array; fresh: boolean }
  | { kind: "whole" }
  | { kind: "error"; error: ConnectError };

/**
 * Group commit. Units of work (a single call's command, or a batch call's items) queue here and
 * are applied many to a transaction. With nothing in flight a transaction starts at the end of the
 * event loop's turn with every unit queued in it, so a lone request waits for nobody. While
 * transactions are in flight, a new one starts when `maxBatch` commands are queued or the oldest
 * has waited `lingerMs`: without that wait, the callers answered
 * by one batch come back one by one and each takes a free slot alone, and most transactions carry
 * a single command.
 *
 * A transaction is one `pipelinedTransaction`: BEGIN goes out with its first read and COMMIT right
 * behind its writes, so it waits on Postgres twice however many commands it holds: one statement
 * claims every idempotency key, one locked read per kind of row loads what all commands need
 * (money-load.ts), the rules run in memory (money-rules.ts), and one statement writes it all.
 *
 * Commands apply in queue order, a batch's items in request order, as if sent one after the other.
 * Each keeps its own result: a refused one changes nothing (its key's claim is deleted before
 * commit). An atomic unit (a single call, or a batch with `atomic`) applies all its items or, at
 * its first refused item, none. Lock order stays global: idempotency keys sorted, then groups,
 * reservations, ordinary entities, external entities. A transaction that fails as a whole (a
 * database error) is retried one unit at a time, so one bad unit cannot fail its neighbours.
 */
export function createBatcher(options: BatcherOptions) {
  const { sql, outbox, log } = options;
  const cache = new EntityCache(options.entityCacheSize);
  const scheduler = createGroupScheduler<Unit>(Object.assign({}, options, { run: (units: Unit[]) => run(units) }));

  function keysOf(unit: Pick<Unit, "items" | "idempotency">): string[] {
    const keys = unit.items.flatMap((item) => (item.idempotency ? [keyString(item.idempotency)] : []));
    if (unit.idempotency) keys.push(keyString(unit.idempotency));
    return keys;
  }

  async function run(units: Unit[]): Promise<void> {
    batchSize.observe(units.reduce((n, u) => n + u.items.length, 0));
    const endTimer = batchDuration.startTimer();
    let results: UnitResult[];
    try {
      results = (await runCached(units)) ?? (await runLocked(units));
      endTimer();
    } catch (err) {
      // Only a transaction Postgres refused surely applied nothing. One whose connection failed
      // may have committed before the answer was lost: applying its units again could apply them
      // twice, so each caller hears the error, and a retry with an idempotency key is safe
      // (docs/api.md#idempotency).
      if (units.length === 1 || !refusedByPostgres(err)) {
        for (const unit of units) unit.reject(err);
        return;
      }
      batchFallbacks.inc();
      log.warn({ err: (err as Error).message, units: units.length }, "batch failed as a whole; applying its units one by one");
      await Promise.all(units.map((u) => run([u])));
      return;
    }
    outbox.wake();
    units.forEach((unit, i) => {
      unit.resolve(finish(unit, results[i]!));
    });
  }

  /**
   * A cached book over `commands`, once no other batch of this process is writing the rows it
   * names: it waits for such a batch and then writes on the rows it left. Each wait outlasts a
   * batch in flight, and at most `maxInFlight` are, so that bounds the waits. Undefined when the
   * cache cannot serve the commands, or they are still busy after that many waits. The rows are
   * claimed for writing in the same turn as they are found free (`release` gives them back): a
   * batch started beside this one, in the same turn, then finds them busy and waits, where
   * otherwise both would write on the same cached version and the second would be refused as stale.
   */
  async function cachedBookAfterWrites(commands: MoneyCommand[]): Promise<{ open: CachedOpenBook; release: () => void } | undefined> {
    for (let waits = 0; ; waits++) {
      const cached = openCachedBook(commands, cache, options.subjectOf);
      if (!cached) return undefined;
      if ("book" in cached) {
        return { open: cached, release: cache.claimWriting(cached.book.rows().flatMap((row) => (row.is_external ? [] : [row.id]))) };
      }
      if (waits === options.maxInFlight) return undefined;
      batchWaits.inc();
      await cache.whenWritten(cached.busy);
    }
  }

  /**
   * Applies `units` on cached rows, written with no read before it, in one round trip
   * (docs/architecture.md#cached-balances). Their idempotency keys are taken as new and inserted
   * with their responses, before the write. Undefined when they need more than the cache holds
   * (anything but transfers, deposits and withdrawals between cached entities), name a key twice,
   * were written on rows that had changed since they were cached, carried a key that exists, or
   * had a keyed command refused (its key may hold an earlier success): then nothing was written,
   * and the caller applies them the usual way, which claims the keys first (and replays a known
   * one) and reads the rows under lock.
   */
  async function runCached(units: Unit[]): Promise<UnitResult[] | undefined> {
    const commands = commandsOf(units);
    if (commands.length === 0) return undefined;
    const allKeys = units.flatMap((unit) => unit.keys);
    // A key twice in one batch is answered from the first use: the claiming path handles that.
    if (new Set(allKeys).size !== allKeys.length) return undefined;
    const claimed = await cachedBookAfterWrites(commands);
    if (!claimed) return undefined;
    const { open, release } = claimed;
    try {
      // No key is claimed, so every unit is live and applyUnits asks for a book over these same commands.
      let results: UnitResult[];
      if (allKeys.length === 0) {
        // One statement on its own: a transaction with no BEGIN or COMMIT.
        const writes = sentWrites();
        results = await applyUnits(sql as unknown as Tx, units, writes, openOn(open, sql), "insert");
        await Promise.all(writes);
      } else {
        // The keys' insert and the write, pipelined between BEGIN and COMMIT: still one round trip.
        results = await pipelinedTransaction(sql, (tx, writes) => applyUnits(tx, units, writes, openOn(open, tx), "insert"));
      }
      batchPaths.inc({ path: "cached" });
      return results;
    } catch (err) {
      if (sqlState(err) === "40001") batchPaths.inc({ path: "stale" });
      else if (isKnownKeyError(err)) batchPaths.inc({ path: "known_key" });
      else if (err instanceof RefusedUnclaimedKey) batchPaths.inc({ path: "keyed_refusal" });
      else throw err;
      return undefined;
    } finally {
      release();
    }
  }

  /**
   * Applies `units` in a transaction that reads and locks their rows first. While it runs, the
   * ordinary entities it names, and from its read those of the groups and reservations it changes,
   * count as being written, so no cached batch rests on them meanwhile.
   */
  async function runLocked(units: Unit[]): Promise<UnitResult[]> {
    batchPaths.inc({ path: "locked" });
    // Claimed before the transaction waits for a connection, so no cached batch starts on them meanwhile.
    const named = new Set([...namedEntityIds(commandsOf(units))].filter((id) => !cache.external(id)));
    const releases = [cache.claimWriting([...named])];
    try {
      return await pipelinedTransaction(sql, (tx, writes) =>
        applyUnits(
          tx,
          units,
          writes,
          async (commands) => {
            const open = await openBook(tx, commands, cache, options.subjectOf);
            releases.push(cache.claimWriting(open.book.rows().flatMap((row) => (row.is_external || named.has(row.id) ? [] : [row.id]))));
            return open;
          },
          "claim",
        ),
      );
    } finally {
      for (const release of releases) release();
    }
  }

  /** Builds, after commit, the responses the transaction left for later. */
  function finish(unit: Unit, result: UnitResult): FinalResult {
    if (!("answers" in result) || result.whole) return result as FinalResult;
    const answers = result.answers.map((a) => (isLater(a) ? a.later() : a));
    if (!unit.respondWhole) return { answers };
    return { answers, whole: create(unit.respondWhole.schema, unit.respondWhole.respond(answers)) };
  }

  async function applyUnits(
    tx: Tx,
    units: Unit[],
    writes: Promise<unknown>[],
    open: (commands: MoneyCommand[]) => Promise<OpenBook>,
    /**
     * `claim`: claim every key before anything is applied, and settle them at the end. `insert`:
     * take every key as new and insert the fresh ones with their responses at the end, which
     * fails the transaction if one exists (a cached batch: nothing may be read before the write).
     */
    keyHandling: "claim" | "insert",
  ): Promise<UnitResult[]> {
    // Claims first, each key once, in key order, so two transactions never wait on each other's keys in a cycle.
    const toClaim = new Map<string, KeyClaim>();
    for (const unit of units) {
      if (unit.idempotency) toClaim.set(keyString(unit.idempotency), unit.idempotency);
      for (const item of unit.items) {
        if (item.idempotency && !(item.command instanceof ConnectError) && !toClaim.has(keyString(item.idempotency))) {
          toClaim.set(keyString(item.idempotency), item.idempotency);
        }
      }
    }
    const sortedKeys = [...toClaim.keys()].sort();
    const claims: Array<Claim | Error> =
      keyHandling === "claim"
        ? await claimIdempotencyKeys(
            tx,
            sortedKeys.map((k) => toClaim.get(k)!),
          )
        : sortedKeys.map(() => ({ kind: "new" }));
    const keys = new Map<string, KeyState>();
    const claimedNew = new Set<string>();
    sortedKeys.forEach((k, n) => {
      const claim = claims[n]! as Claim | Error;
      if (claim instanceof Error) keys.set(k, { kind: "error", error: ConnectError.from(claim) });
      else if (claim.kind === "replay")
        keys.set(k, { kind: "answered", fingerprint: toClaim.get(k)!.fingerprint, response: claim.response, fresh: false });
      else {
        keys.set(k, { kind: "free" });
        claimedNew.add(k);
      }
    });

    const results: Array<UnitResult | undefined> = new Array(units.length);
    const completed: Array<{ accountId: string; key: string; response: Uint8Array }> = [];
    /**
     * A unit that applied: its answers, and for a batch call its whole response. A batch call with
     * a key stores its whole response, so that is built now; otherwise the responses wait for commit.
     */
    const answered = (unit: Unit, pending: Array<ItemAnswer | LaterAnswer>): UnitResult => {
      if (!unit.respondWhole || !unit.idempotency) return { answers: pending };
      const answers = pending.map((a) => (isLater(a) ? a.later() : a));
      const whole = create(unit.respondWhole.schema, unit.respondWhole.respond(answers));
      const { accountId, key } = unit.idempotency;
      completed.push({ accountId, key, response: encodeBinary(unit.respondWhole.schema, whole) });
      return { answers, whole };
    };
    units.forEach((unit, u) => {
      if (!unit.idempotency) return;
      const state = keys.get(keyString(unit.idempotency))!;
      if (state.kind === "error") results[u] = { error: state.error };
      else if (state.kind === "answered") results[u] = { replay: state.response };
      else keys.set(keyString(unit.idempotency), { kind: "whole" });
    });
    const live = units.map((unit, u) => ({ unit, u })).filter(({ u }) => results[u] === undefined);
    let bookWrite: (() => Promise<void>) | undefined;
    const commands = commandsOf(live.map(({ unit }) => unit));
    if (commands.length > 0) {
      const { book, write } = await open(commands);
      for (const { unit, u } of live) {
        const start = book.checkpoint();
        // Key changes of this unit; kept only if the unit is.
        const local = new Map<string, KeyState>();
        const stateOf = (k: string) => local.get(k) ?? keys.get(k)!;
        const answers = unit.items.map((item): ItemAnswer | LaterAnswer => {
          if (item.command instanceof ConnectError) return item.command;
          const k = item.idempotency ? keyString(item.idempotency) : undefined;
          if (k !== undefined) {
            const state = stateOf(k);
            if (state.kind === "error") return state.error;
            if (state.kind === "whole")
              return ruleViolation("idempotency_conflict", "this idempotency key was already used with a different request");
            if (state.kind === "answered") {
              if (!state.fingerprint.equals(item.idempotency!.fingerprint)) {
                return ruleViolation("idempotency_conflict", "this idempotency key was already used with a different request");
              }
              return { response: decodeBinary(item.responseSchema, state.response), replayed: true };
            }
          }
          const outcome = book.apply(item.command);
          if (!outcome.ok) return outcome.error;
          if (k === undefined) return { later: () => ({ response: create(item.responseSchema, item.respond(outcome)), replayed: false }) };
          const response = create(item.responseSchema, item.respond(outcome));
          if (k !== undefined) {
            local.set(k, {
              kind: "answered",
              fingerprint: item.idempotency!.fingerprint,
              response: encodeBinary(item.responseSchema, response),
              fresh: true,
            });
          }
          return { response, replayed: false };
        });
        const refusedAt = unit.atomic ? answers.findIndex((a) => a instanceof ConnectError) : -1;
        if (refusedAt >= 0) {
          book.rollback(start);
          if (unit.idempotency) keys.set(keyString(unit.idempotency), { kind: "free" });
          results[u] = { refused: new AtomicRefusal(refusedAt, answers[refusedAt] as ConnectError) };
          continue;
        }
        for (const [k, state] of local) keys.set(k, state);
        results[u] = answered(unit, answers);
      }
      bookWrite = write;
    } else {
      // Nothing to apply: every live unit holds only refused items (an atomic one is refused at its first).
      for (const { unit, u } of live) {
        const answers = unit.items.map((item) => item.command as ConnectError);
        if (unit.atomic) {
          if (unit.idempotency) keys.set(keyString(unit.idempotency), { kind: "free" });
          results[u] = { refused: new AtomicRefusal(0, answers[0]!) };
        } else {
          results[u] = answered(unit, answers);
        }
      }
    }
    // Each key claimed here ends stored with its response, or deleted so a retry is tried afresh.
    const refused: Array<{ accountId: string; key: string }> = [];
    for (const k of claimedNew) {
      const state = keys.get(k)!;
      const { accountId, key } = toClaim.get(k)!;
      if (state.kind === "answered" && state.fresh) completed.push({ accountId, key, response: state.response });
      else if (state.kind === "free") refused.push({ accountId, key });
    }
    // A key taken as new whose command was refused may have been used already: its first success
    // must be replayed, not the rules checked again (docs/api.md#idempotency). Only a claim can
    // tell, so nothing is written here and the caller applies the units the claiming way.
    if (keyHandling === "insert" && refused.length > 0) throw new RefusedUnclaimedKey();
    // The keys before the book, as a claim comes before the rows: the same lock order everywhere.
    if (keyHandling === "claim") writes.push(...settleIdempotencyKeys(tx, completed, refused));
    else {
      const stored = completed.map((c) => Object.assign({}, c, { fingerprint: toClaim.get(keyString(c))!.fingerprint }));
      writes.push(
        ...insertIdempotencyKeys(
          tx,
          stored.sort((a, b) => (keyString(a) < keyString(b) ? -1 : 1)),
        ),
      );
    }
    if (bookWrite) writes.push(bookWrite());
    return results as UnitResult[];
  }

  function enqueue(unit: Omit<Unit, "queuedAt" | "keys" | "size" | "resolve" | "reject">): Promise<UnitResult> {
    return new Promise<UnitResult>((resolve, reject) => {
      // Every field written out, not `{ ...unit, ... }`: V8 makes a new hidden class for each
      // property after a spread, on every call (bench/README.md, "Hidden classes per call").
      scheduler.enqueue({
        items: unit.items,
        atomic: unit.atomic,
        idempotency: unit.idempotency,
        respondWhole: unit.respondWhole,
        queuedAt: performance.now(),
        keys: keysOf(unit),
        size: unit.items.length,
        resolve,
        reject,
      });
    });
  }

  return {
    /** Queues one command and resolves with its own answer once its transaction committed. */
    async submit<O extends DescMessage>(submission: Submission<O>): Promise<Answer<O>> {
      const result = await enqueue({ items: [submission as unknown as Submission<DescMessage>], atomic: true });
      if ("refused" in result) throw result.refused.error;
      if ("error" in result) throw result.error;
      if ("replay" in result) throw new Error("a single call has no whole-call key");
      const answer = result.answers[0]!;
      if (answer instanceof ConnectError) throw answer;
      return answer as Answer<O>;
    },

    /**
     * Queues a batch call's items as one unit, applied in order in one transaction, and resolves
     * with the whole response; an atomic batch with a refused item rejects with `AtomicRefusal`.
     */
    async submitBatch<O extends DescMessage>(batch: BatchSubmission<O>): Promise<Answer<O>> {
      const result = await enqueue({
        items: batch.items,
        atomic: batch.atomic,
        ...(batch.idempotency ? { idempotency: batch.idempotency } : {}),
        respondWhole: { schema: batch.responseSchema, respond: batch.respond as (answers: ItemAnswer[]) => MessageInitShape<DescMessage> },
      });
      if ("refused" in result) throw result.refused;
      if ("error" in result) throw result.error;
      if ("replay" in result) return { response: decodeBinary(batch.responseSchema, result.replay), replayed: true };
      return { response: result.whole as MessageShape<O>, replayed: false };
    },
  };
}
