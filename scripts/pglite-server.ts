// A Postgres wire-protocol server in front of one PGlite instance, so that the services' postgres.js
// pools (several connections each, several services, the CLI in another process) can share the
// embedded database of `pnpm start`.
//
// PGlite is ONE single-user backend session. `@electric-sql/pglite-socket` (0.2.17) multiplexes
// its clients message by message: outside an explicit transaction the Parse/Bind/Execute of two
// clients can interleave (the unnamed statement of one runs with the other's parameters), every
// client's startup message is fed to the one session (the last search_path wins for everyone), and
// named prepared statements of two clients collide. So this server does its own multiplexing:
//
// - The session belongs to one client connection at a time, from its first message until a
//   ReadyForQuery says the session is idle ('I') again: a whole transaction (`sql.begin`), or one
//   implicit transaction (Parse..Sync). Statements of two transactions never interleave; the
//   others wait in a FIFO queue, and a client with more queued work goes to the back of the line.
// - Work runs only in complete units (up to Sync, Query, Flush, FunctionCall, CopyDone/CopyFail),
//   so a half-received pipeline never runs, and a client that disappears mid-write changes nothing.
// - Startup parameters (search_path, application_name...) are answered here and applied as session
//   settings (RESET ALL, then set_config) each time the session passes to a client whose parameters
//   differ from the last ones applied: every service sees its own schema without a prefix.
// - Named statements and portals are renamed `c<client>_<name>`, so each client's prepared
//   statements are its own (postgres.js prepares by default), and are deallocated when it leaves.
// - A client that leaves while it holds the session (a crash inside `sql.begin`) is rolled back.
// - No deadlock between clients: a transaction never waits for another client's lock, since no
//   other client runs until it ends. A caller that holds a transaction open and waits for work on
//   another connection of its own would wait forever, so an owner idle in a transaction while others
//   wait is disconnected (and rolled back) after `idleInTransactionTimeoutMs`, like Postgres's
//   idle_in_transaction_session_timeout.
//
// What a real server has and this one has not: parallelism (one statement runs at a time, which
// suits a laptop), LISTEN/NOTIFY across clients, session-level SET that survives a hand-over to a
// client with other startup parameters, query cancellation, authentication (it listens on loopback
// only), and TLS. The services need none of them.
import { randomInt } from "node:crypto";
import { createServer, type Server, type Socket } from "node:net";
import type { PGlite } from "@electric-sql/pglite";

const PROTOCOL_3_0 = 196608;
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;

/** Frontend messages after which the backend answers and the client waits: a unit of work ends there. */
const UNIT_END = new Set(["S", "Q", "H", "F", "c", "f"]);

/** Startup parameters that are not session settings, or that must stay as the server has them. */
const NOT_SETTINGS = new Set(["user", "database", "replication", "options", "client_encoding"]);

/** Settings a client learns at connection time (ParameterStatus), read once from PGlite. */
const REPORTED = [
  "server_version",
  "server_encoding",
  "DateStyle",
  "IntervalStyle",
  "TimeZone",
  "integer_datetimes",
  "standard_conforming_strings",
];

/** Options of `servePglite`. */
export interface PgliteServerOptions {
  host: string;
  /** 0 for any free port. */
  port: number;
  /** How long a client may hold the session idle inside a transaction while others wait. */
  idleInTransactionTimeoutMs?: number;
  /** Where to report a client cut off or a failed clean-up. */
  warn?: (message: string) => void;
}

/** A running server. */
export interface PgliteServer {
  port: number;
  /** Disconnects every client (rolling back what is open) and stops listening; PGlite stays open. */
  close(): Promise<void>;
}

interface Client {
  id: number;
  socket: Socket;
  /** Bytes received and not yet split into messages. */
  inbox: Buffer;
  started: boolean;
  /** Startup parameters to apply as settings, and their canonical form to compare. */
  settings: Array<[string, string]>;
  settingsKey: string;
  /** Complete units, ready to run. */
  ready: Buffer[][];
  /** Messages of a unit whose end has not arrived. */
  partial: Buffer[];
  /** Renamed statements this client prepared, to deallocate when it leaves. */
  statements: Set<string>;
  /** The backend waits for this client's COPY data. */
  copying: boolean;
  closed: boolean;
}

/** Serves `db` over the Postgres wire protocol on `host:port`, one transaction at a time. */
export async function servePglite(db: PGlite, options: PgliteServerOptions): Promise<PgliteServer> {
  const warn = options.warn ?? ((m: string) => console.error(m));
  const idleLimitMs = options.idleInTransactionTimeoutMs ?? 60_000;
  const serverParameters = await readServerParameters(db);
  const multiplexer = new SessionMultiplexer(db, serverParameters, warn, idleLimitMs);

  const server: Server = createServer((socket) => multiplexer.accept(socket));

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : options.port;

  return {
    port,
    async close() {
      multiplexer.cancelIdleTimer();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      await multiplexer.disconnectAll();
      await closed;
    },
  };
}

/** The ParameterStatus values every client receives at startup, as PGlite has them. */
async function readServerParameters(db: PGlite): Promise<Map<string, string>> {
  const reported = await db.query<{ name: string; setting: string }>("select name, setting from pg_settings where name = any($1)", [
    REPORTED,
  ]);
  const serverParameters = new Map(reported.rows.map((r) => [r.name, r.setting]));
  serverParameters.set("client_encoding", "UTF8");
  return serverParameters;
}

/** Shares the one PGlite session among client connections, one unit of work (or transaction) at a time. */
class SessionMultiplexer {
  private readonly clients = new Set<Client>();
  /** Clients with ready units, waiting for the session. */
  private readonly waiting: Client[] = [];
  private owner: Client | undefined;
  private appliedSettingsKey: string | undefined;
  private pumping: Promise<void> | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  private nextId = 1;

  constructor(
    private readonly db: PGlite,
    private readonly serverParameters: Map<string, string>,
    private readonly warn: (message: string) => void,
    private readonly idleLimitMs: number,
  ) {}

  accept(socket: Socket): void {
    socket.setNoDelay(true);
    const client: Client = {
      id: this.nextId++,
      socket,
      inbox: Buffer.alloc(0),
      started: false,
      settings: [],
      settingsKey: "",
      ready: [],
      partial: [],
      statements: new Set(),
      copying: false,
      closed: false,
    };
    this.clients.add(client);
    socket.on("data", (chunk) => {
      client.inbox = client.inbox.length === 0 ? chunk : Buffer.concat([client.inbox, chunk]);
      try {
        this.receive(client);
      } catch (err) {
        this.warn(`embedded postgres: dropping a client that sent a malformed message: ${(err as Error).message}`);
        socket.destroy();
      }
    });
    socket.on("error", () => {});
    socket.on("close", () => this.leave(client));
  }

  /** Stops the timer that cuts off an owner idle in a transaction. */
  cancelIdleTimer(): void {
    clearTimeout(this.idleTimer);
  }

  /** Disconnects every client and waits until their clean-ups have run. */
  async disconnectAll(): Promise<void> {
    for (const client of [...this.clients]) client.socket.destroy();
    // Each socket's close event queues its clean-up (an open transaction is rolled back): wait for
    // the events, then for the clean-ups to run, before the caller closes PGlite.
    for (let i = 0; i < 400 && this.clients.size > 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    while (this.pumping) await this.pumping;
  }

  private receive(client: Client): void {
    while (!client.closed) {
      const inbox = client.inbox;
      if (!client.started) {
        if (inbox.length < 8) return;
        const length = inbox.readInt32BE(0);
        if (length < 8 || length > 10_000) throw new Error("bad startup packet length");
        if (inbox.length < length) return;
        const code = inbox.readInt32BE(4);
        client.inbox = inbox.subarray(length);
        if (code === SSL_REQUEST || code === GSSENC_REQUEST) client.socket.write("N");
        else if (code === CANCEL_REQUEST)
          client.socket.destroy(); // No backend to signal: the query runs to its end.
        else if (code === PROTOCOL_3_0) this.start(client, inbox.subarray(8, length));
        else {
          client.socket.end(errorResponse("FATAL", "0A000", `unsupported frontend protocol ${code >>> 16}.${code & 0xffff}`));
          client.closed = true;
        }
        continue;
      }
      if (inbox.length < 5) return;
      const total = 1 + inbox.readInt32BE(1);
      if (total < 5) throw new Error("bad message length");
      if (inbox.length < total) return;
      // A copy: the inbox buffer is reused by later concatenations.
      const message = Buffer.from(inbox.subarray(0, total));
      client.inbox = inbox.subarray(total);
      const type = String.fromCharCode(message[0]!);
      if (type === "X") {
        client.socket.end();
        return;
      }
      client.partial.push(renameObjects(client, message));
      if (UNIT_END.has(type)) {
        client.ready.push(client.partial);
        client.partial = [];
        this.schedule(client);
      }
    }
  }

  private start(client: Client, body: Buffer): void {
    const parameters = new Map<string, string>();
    const parts = body.toString("utf8").split("\0");
    for (let i = 0; i + 1 < parts.length && parts[i] !== ""; i += 2) parameters.set(parts[i]!, parts[i + 1]!);
    client.settings = [...parameters]
      .filter(([name]) => !NOT_SETTINGS.has(name) && /^[A-Za-z_][A-Za-z0-9_.]*$/.test(name))
      .sort(([a], [b]) => a.localeCompare(b));
    client.settingsKey = JSON.stringify(client.settings);
    client.started = true;
    const statuses = new Map(this.serverParameters);
    statuses.set("application_name", parameters.get("application_name") ?? "");
    statuses.set("session_authorization", parameters.get("user") ?? "postgres");
    statuses.set("is_superuser", "on");
    client.socket.write(
      Buffer.concat([
        message("R", int32(0)), // AuthenticationOk: loopback only, like `trust` in pg_hba.conf.
        ...[...statuses].map(([name, value]) => message("S", Buffer.from(`${name}\0${value}\0`))),
        message("K", Buffer.concat([int32(client.id), int32(randomInt(2 ** 31))])),
        message("Z", Buffer.from("I")),
      ]),
    );
  }

  private schedule(client: Client): void {
    if (client !== this.owner && !this.waiting.includes(client)) this.waiting.push(client);
    this.pumping ??= this.pump().finally(() => (this.pumping = undefined));
  }

  /** Runs units one after another, only ever one at a time, handing the session over at idle. */
  private async pump(): Promise<void> {
    for (;;) {
      let client = this.owner;
      if (client) {
        if (client.ready.length === 0) break; // The owner's transaction continues when its next unit arrives.
      } else {
        client = this.waiting.shift();
        if (!client) break;
        if (client.ready.length === 0) continue;
        this.owner = client;
        if (client.settingsKey !== this.appliedSettingsKey) {
          const applied = await this.applySettings(client);
          if (!applied) continue;
        }
      }
      clearTimeout(this.idleTimer);
      await this.runUnit(client, client.ready.shift()!);
    }
    if (this.owner && this.waiting.length > 0) this.startIdleTimer(this.owner);
  }

  /** Disconnects `stuck` if it still holds the session, idle, once the idle limit has passed. */
  private startIdleTimer(stuck: Client): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      if (this.owner !== stuck || stuck.ready.length > 0) return;
      this.warn(
        `embedded postgres: a connection stayed idle in a transaction for ${this.idleLimitMs} ms while others waited; it was closed and its transaction rolled back`,
      );
      stuck.socket.destroy();
    }, this.idleLimitMs);
    this.idleTimer.unref();
  }

  private async runUnit(client: Client, unit: Buffer[]): Promise<void> {
    let output: Uint8Array;
    try {
      output = await this.db.execProtocolRaw(Buffer.concat(unit));
    } catch (err) {
      // PGlite itself failed (not an SQL error, which comes back as an ErrorResponse): nothing
      // sensible can follow on this connection.
      this.warn(`embedded postgres: ${(err as Error).message}`);
      client.socket.destroy();
      this.owner = undefined;
      return;
    }
    if (!client.closed && output.length > 0) client.socket.write(output);
    const status = lastReadyStatus(output);
    if (hasMessage(output, "G")) client.copying = true;
    if (status !== undefined) client.copying = false;
    if (status === "I") {
      this.owner = undefined;
      if (client.ready.length > 0) this.waiting.push(client);
    }
  }

  /** Makes the session's settings the client's startup parameters; false when they are refused. */
  private async applySettings(client: Client): Promise<boolean> {
    const statements = [
      "reset all",
      ...client.settings.map(([name, value]) => `select pg_catalog.set_config(${literal(name)}, ${literal(value)}, false)`),
    ];
    const output = await this.db.execProtocolRaw(message("Q", Buffer.from(statements.join(";\n") + "\0")));
    const error = firstError(output);
    if (error === undefined) {
      this.appliedSettingsKey = client.settingsKey;
      return true;
    }
    // Like Postgres refusing an unknown parameter at connection time, but on first use.
    this.appliedSettingsKey = undefined;
    this.owner = undefined;
    client.ready = [];
    if (!client.closed) client.socket.end(errorResponse("FATAL", "22023", `invalid connection parameter: ${error}`));
    return false;
  }

  private leave(client: Client): void {
    if (client.closed && !this.clients.has(client)) return;
    client.closed = true;
    this.clients.delete(client);
    client.partial = [];
    const index = this.waiting.indexOf(client);
    if (index >= 0) this.waiting.splice(index, 1);
    const holdsSession = this.owner === client;
    if (!holdsSession && client.statements.size === 0) return;
    // The clean-up runs as this client's last unit: at once when it holds the session (its open
    // transaction is rolled back before anyone else runs), else when the session is next idle.
    const cleanup: Buffer[] = [];
    if (holdsSession) {
      if (client.copying) cleanup.push(message("f", Buffer.from("client disconnected\0")));
      cleanup.push(message("S", Buffer.alloc(0)), message("Q", Buffer.from("rollback\0")));
    }
    for (const name of client.statements) cleanup.push(message("C", Buffer.from(`S${name}\0`)));
    cleanup.push(message("S", Buffer.alloc(0)));
    client.ready = [cleanup];
    this.schedule(client);
  }
}

/**
 * Prefixes the names of prepared statements and portals with the client's id, in the messages
 * that carry them, so that clients sharing the session never see each other's.
 */
function renameObjects(client: Client, msg: Buffer): Buffer {
  const type = String.fromCharCode(msg[0]!);
  const rename = (name: string) => (name === "" ? name : `c${client.id}_${name}`);
  let names: string[];
  let start = 5;
  switch (type) {
    case "P": // Parse: statement, then the query.
    case "E": // Execute: portal.
      names = readStrings(msg, start, 1);
      break;
    case "B": // Bind: portal, statement.
      names = readStrings(msg, start, 2);
      break;
    case "D": // Describe and Close: 'S' or 'P', then the name.
    case "C":
      start = 6;
      names = readStrings(msg, start, 1);
      break;
    default:
      return msg;
  }
  const renamed = names.map(rename);
  if (type === "P" && renamed[0]) client.statements.add(renamed[0]);
  if (type === "C" && msg[5] === 0x53 && renamed[0]) client.statements.delete(renamed[0]);
  if (renamed.every((n, i) => n === names[i])) return msg;
  const consumed = names.reduce((sum, n) => sum + Buffer.byteLength(n) + 1, 0);
  const body = Buffer.concat([msg.subarray(5, start), Buffer.from(renamed.map((n) => n + "\0").join("")), msg.subarray(start + consumed)]);
  return message(type, body);
}

function int32(value: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(value);
  return b;
}

/** One wire message: type byte, length (itself included), body. */
function message(type: string, body: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.write(type, 0, "latin1");
  header.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([header, body]);
}

function errorResponse(severity: string, code: string, text: string): Buffer {
  return message("E", Buffer.from(`S${severity}\0V${severity}\0C${code}\0M${text}\0\0`));
}

function literal(value: string): string {
  // standard_conforming_strings is on in PGlite, as in every supported Postgres: only quotes double.
  return `'${value.replace(/'/g, "''")}'`;
}

function readStrings(msg: Buffer, offset: number, count: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    const end = msg.indexOf(0, offset);
    if (end < 0) throw new Error("unterminated string in a message");
    out.push(msg.toString("utf8", offset, end));
    offset = end + 1;
  }
  return out;
}

/** Calls `visit` with the type and body of each backend message in `data`. */
function eachMessage(data: Uint8Array, visit: (type: number, body: Buffer) => void): void {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  for (let at = 0; at + 5 <= buf.length; ) {
    const end = at + 1 + buf.readInt32BE(at + 1);
    visit(buf[at]!, buf.subarray(at + 5, end));
    at = end;
  }
}

/** The transaction status of the last ReadyForQuery in `data` ('I', 'T' or 'E'), if any. */
function lastReadyStatus(data: Uint8Array): string | undefined {
  let status: string | undefined;
  eachMessage(data, (type, body) => {
    if (type === 0x5a) status = String.fromCharCode(body[0]!);
  });
  return status;
}

function hasMessage(data: Uint8Array, type: string): boolean {
  let found = false;
  const code = type.charCodeAt(0);
  eachMessage(data, (t) => (found ||= t === code));
  return found;
}

/** The message of the first ErrorResponse in `data`, if any. */
function firstError(data: Uint8Array): string | undefined {
  let text: string | undefined;
  eachMessage(data, (type, body) => {
    if (type !== 0x45 || text !== undefined) return;
    for (const field of body.toString("utf8").split("\0")) if (field.startsWith("M")) text = field.slice(1);
  });
  return text;
}
