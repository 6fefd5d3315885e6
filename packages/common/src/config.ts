import { existsSync } from "node:fs";
import { UNARY_FAST_PATH_VARIABLE, UnaryFastPathSwitchError, unaryFastPathEnabled } from "@ledger/connect-fast";
import { STREAM_LIMITS, type StreamLimits, type StreamSettings } from "./nats.js";

/**
 * Reading configuration from the environment, once, at start. A bad value stops the start with a
 * message that names the variable, instead of failing later in a request.
 */
export class ConfigError extends Error {
  constructor(variable: string, problem: string) {
    super(`configuration: ${variable} ${problem}`);
    this.name = "ConfigError";
  }
}

type Env = Record<string, string | undefined>;

/** A string variable, or its default when unset or empty. */
export function envString(env: Env, name: string, fallback: string): string {
  const value = env[name];
  return value === undefined || value === "" ? fallback : value;
}

/** An optional string variable. */
export function envOptional(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === "" ? undefined : value;
}

/** An integer variable within [min, max]. */
export function envInt(env: Env, name: string, fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^-?\d+$/.test(raw.trim())) throw new ConfigError(name, `must be an integer, got ${JSON.stringify(raw)}`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

/** A boolean variable: true/false/1/0/yes/no. */
export function envBool(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const lowered = raw.trim().toLowerCase();
  if (["true", "1", "yes"].includes(lowered)) return true;
  if (["false", "0", "no"].includes(lowered)) return false;
  throw new ConfigError(name, `must be true or false, got ${JSON.stringify(raw)}`);
}

/** A URL variable whose scheme is one of `schemes`. */
export function envUrl(env: Env, name: string, fallback: string, schemes: string[]): string {
  const value = envString(env, name, fallback);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(name, `must be a URL, got ${JSON.stringify(value)}`);
  }
  if (!schemes.includes(url.protocol.replace(/:$/, ""))) {
    throw new ConfigError(name, `must use ${schemes.join(" or ")}, got ${url.protocol}`);
  }
  return value;
}

/** A comma-separated list of URLs (the servers of a cluster), each checked as `envUrl` checks one. */
export function envUrlList(env: Env, name: string, fallback: string, schemes: string[]): string {
  const value = envString(env, name, fallback);
  for (const one of value.split(",")) envUrl({ [name]: one.trim() }, name, fallback, schemes);
  return value;
}

/** RPC_BODY_LIMIT_BYTES unless set: room for the largest batch, far from what would strain a process. */
export const DEFAULT_RPC_BODY_LIMIT_BYTES = 4 * 1024 * 1024;

/** Per-caller request budgets (a token bucket per API key); the gateway and every RPC port read the same variables. */
export interface RateLimitConfig {
  /** Requests per second per API key on average (0: no limit); over it, 429 / resource_exhausted with a retry-after. */
  rateLimitPerSecond: number;
  /** Requests a key may send at once above the average. */
  rateLimitBurst: number;
}

/** Reads the request budgets, which are the same for the gateway and every RPC port. */
export function readRateLimitConfig(env: Env = process.env): RateLimitConfig {
  return {
    rateLimitPerSecond: envInt(env, "GATEWAY_RATE_LIMIT_PER_SECOND", 1_000, 0, 1_000_000),
    rateLimitBurst: envInt(env, "GATEWAY_RATE_LIMIT_BURST", 2_000, 1, 10_000_000),
  };
}

/** HTTP_HEADER_TIMEOUT_MS unless set: far more than any client needs to send a request's headers. */
export const DEFAULT_HEADER_TIMEOUT_MS = 10_000;
/**
 * HTTP_IDLE_TIMEOUT_MS unless set: above the 60 s idle timeout of common load balancers, so one in
 * front of the gateway never reuses a connection the gateway has just closed.
 */
export const DEFAULT_IDLE_TIMEOUT_MS = 65_000;

/**
 * How long every listening port lets a connection hold its socket without using it (server.ts's
 * `listen`); the gateway and every RPC port read the same variables. Unset in configurations built
 * by hand (tests): the defaults.
 */
export interface ConnectionTimeouts {
  /** A new connection that has not sent a request's complete headers by then is closed (HTTP_HEADER_TIMEOUT_MS). */
  headerTimeoutMs?: number | undefined;
  /**
   * A connection with no request in progress (an HTTP/2 session with no open stream) and no new one
   * for this long is closed (HTTP_IDLE_TIMEOUT_MS); PINGs and SETTINGS do not keep it open.
   */
  idleTimeoutMs?: number | undefined;
}

/** Reads the connection timeouts, which are the same for the gateway's ports and every RPC port. */
export function readConnectionTimeouts(env: Env = process.env): Required<ConnectionTimeouts> {
  return {
    headerTimeoutMs: envInt(env, "HTTP_HEADER_TIMEOUT_MS", DEFAULT_HEADER_TIMEOUT_MS, 100, 600_000),
    idleTimeoutMs: envInt(env, "HTTP_IDLE_TIMEOUT_MS", DEFAULT_IDLE_TIMEOUT_MS, 100, 3_600_000),
  };
}

/** Settings every service process shares: where Postgres and NATS are, how events are named, what its RPC port accepts. */
export interface InfraConfig extends RateLimitConfig, ConnectionTimeouts {
  /** Largest RPC request body, checked before the caller is authenticated; larger ones are refused resource_exhausted. */
  rpcBodyLimitBytes: number;
  /**
   * RPC_UNARY_FAST_PATH: unary Connect calls take @ledger/connect-fast's fast paths. On by default;
   * false leaves every call to connect-node and Connect's transports. Read by the package's
   * `unaryFastPathEnabled`, the one reader of the variable; a bad value stops the start here.
   */
  rpcUnaryFastPath?: boolean | undefined;
  natsUrl: string;
  /** NATS_USER and NATS_PASSWORD: the server's user, both or neither; the password is never logged. */
  natsUser?: string | undefined;
  natsPassword?: string | undefined;
  /** NATS_TLS_CA: a PEM file of the CA that signed the server's certificate; set, the connection must use TLS. */
  natsTlsCa?: string | undefined;
  natsStream: string;
  natsSubjectPrefix: string;
  /** NATS_STREAM_REPLICAS, NATS_STREAM_MAX_BYTES, NATS_STREAM_MAX_AGE_HOURS: what the event stream holds. */
  natsStreamLimits: StreamLimits;
  logLevel: string;
  /** OpenTelemetry tracing; undefined (the default) leaves it off. */
  tracing?: TracingConfig | undefined;
}

/** The event stream as every process makes it: name, subjects and limits from the configuration. */
export function streamSettingsOf(config: InfraConfig): StreamSettings {
  return { name: config.natsStream, subjectPrefix: config.natsSubjectPrefix, limits: config.natsStreamLimits };
}

/** Reads the settings shared by every process. */
export function readInfraConfig(env: Env = process.env): InfraConfig {
  const natsSubjectPrefix = envString(env, "NATS_SUBJECT_PREFIX", "ledger");
  if (!/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(natsSubjectPrefix)) {
    throw new ConfigError("NATS_SUBJECT_PREFIX", "must be dot-separated tokens of letters, digits, - and _");
  }
  const natsStream = envString(env, "NATS_STREAM", "LEDGER_EVENTS");
  if (!/^[A-Za-z0-9_-]+$/.test(natsStream)) {
    throw new ConfigError("NATS_STREAM", "must contain only letters, digits, - and _");
  }
  const natsUser = envOptional(env, "NATS_USER");
  const natsPassword = envOptional(env, "NATS_PASSWORD");
  if (natsUser !== undefined && natsPassword === undefined) throw new ConfigError("NATS_PASSWORD", "is required with NATS_USER");
  if (natsPassword !== undefined && natsUser === undefined) throw new ConfigError("NATS_USER", "is required with NATS_PASSWORD");
  const natsTlsCa = envOptional(env, "NATS_TLS_CA");
  if (natsTlsCa !== undefined && !existsSync(natsTlsCa))
    throw new ConfigError("NATS_TLS_CA", `must be a readable PEM file, and ${JSON.stringify(natsTlsCa)} does not exist`);
  return {
    natsUrl: envUrlList(env, "NATS_URL", "nats://127.0.0.1:4222", ["nats", "tls", "ws", "wss"]),
    natsUser,
    natsPassword,
    natsTlsCa,
    natsStream,
    natsSubjectPrefix,
    natsStreamLimits: {
      replicas: envInt(env, "NATS_STREAM_REPLICAS", STREAM_LIMITS.replicas, 1, 5),
      maxBytes: envInt(env, "NATS_STREAM_MAX_BYTES", STREAM_LIMITS.maxBytes, 1024, 2 ** 50),
      maxAgeHours: envInt(env, "NATS_STREAM_MAX_AGE_HOURS", STREAM_LIMITS.maxAgeHours, 1, 24 * 365),
    },
    logLevel: envString(env, "LOG_LEVEL", "info"),
    tracing: readTracingConfig(env),
    rpcBodyLimitBytes: envInt(env, "RPC_BODY_LIMIT_BYTES", DEFAULT_RPC_BODY_LIMIT_BYTES, 1024, 64 * 1024 * 1024),
    rpcUnaryFastPath: readUnaryFastPath(env),
    ...readRateLimitConfig(env),
    ...readConnectionTimeouts(env),
  };
}

/** RPC_UNARY_FAST_PATH as @ledger/connect-fast reads it, a bad value a `ConfigError` like any other. */
function readUnaryFastPath(env: Env): boolean {
  try {
    return unaryFastPathEnabled(env);
  } catch (e) {
    if (e instanceof UnaryFastPathSwitchError) throw new ConfigError(UNARY_FAST_PATH_VARIABLE, e.problem);
    throw e;
  }
}

/** Where and how a process exports its spans; see `startTracing`. */
export interface TracingConfig {
  /** The OTLP/HTTP traces URL (ending in `/v1/traces` unless given whole). */
  tracesUrl: string;
  /** OTEL_SERVICE_NAME; each process falls back to its own name (gateway, ledger, hold, notification). */
  serviceName?: string | undefined;
  /** Headers of export requests; often a collector's token, so never logged. */
  headers: Record<string, string>;
  /** How long the batch span processor gathers spans before an export. */
  exportDelayMs: number;
  /** The body of export requests: protobuf (OpenTelemetry's default) or JSON. */
  protocol: OtlpProtocol;
}

/** The OTLP/HTTP encodings this build exports; gRPC is not one of them. */
export const OTLP_PROTOCOLS = ["http/protobuf", "http/json"] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];

// The traces-specific variable wins over the general one, as the OpenTelemetry specification says;
// only the one that decides is checked, so a general `grpc` for other signals does not stop a start.
function readOtlpProtocol(env: Env): OtlpProtocol {
  for (const name of ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]) {
    const protocol = envOptional(env, name);
    if (protocol === undefined) continue;
    if (!(OTLP_PROTOCOLS as readonly string[]).includes(protocol)) {
      throw new ConfigError(
        name,
        `must be ${OTLP_PROTOCOLS.join(" or ")} (the protocols this build exports), got ${JSON.stringify(protocol)}`,
      );
    }
    return protocol as OtlpProtocol;
  }
  return "http/protobuf";
}

// OTEL_EXPORTER_OTLP_HEADERS: `key=value` pairs, comma-separated, values URL-encoded (W3C baggage form).
function parseOtlpHeaders(env: Env, name: string): Record<string, string> {
  const raw = envOptional(env, name);
  const headers: Record<string, string> = {};
  if (raw === undefined) return headers;
  for (const pair of raw.split(",")) {
    if (pair.trim() === "") continue;
    const at = pair.indexOf("=");
    const key = at > 0 ? pair.slice(0, at).trim() : "";
    // The value is not quoted back: it is usually a credential.
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(key)) throw new ConfigError(name, "must be comma-separated key=value pairs");
    let value: string;
    try {
      value = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      throw new ConfigError(name, `has a value that is not URL-encoded (key ${key})`);
    }
    headers[key.toLowerCase()] = value;
  }
  return headers;
}

/**
 * OpenTelemetry tracing from the standard variables, or undefined when it is off: it is on only
 * when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as given) or OTEL_EXPORTER_OTLP_ENDPOINT (a base
 * to which `/v1/traces` is added) is set, and OTEL_SDK_DISABLED is not true. Spans go out as
 * OTLP/HTTP, protobuf unless OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL says http/json.
 */
export function readTracingConfig(env: Env = process.env): TracingConfig | undefined {
  if (envBool(env, "OTEL_SDK_DISABLED", false)) return undefined;
  const tracesEndpoint = envOptional(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  const baseEndpoint = envOptional(env, "OTEL_EXPORTER_OTLP_ENDPOINT");
  if (tracesEndpoint === undefined && baseEndpoint === undefined) return undefined;
  const protocol = readOtlpProtocol(env);
  const tracesUrl =
    tracesEndpoint !== undefined
      ? envUrl(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tracesEndpoint, ["http", "https"])
      : `${envUrl(env, "OTEL_EXPORTER_OTLP_ENDPOINT", baseEndpoint!, ["http", "https"]).replace(/\/+$/, "")}/v1/traces`;
  const serviceName = envOptional(env, "OTEL_SERVICE_NAME");
  return {
    tracesUrl,
    serviceName,
    headers: Object.assign(
      {},
      parseOtlpHeaders(env, "OTEL_EXPORTER_OTLP_HEADERS"),
      parseOtlpHeaders(env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
    ),
    exportDelayMs: envInt(env, "OTEL_BSP_SCHEDULE_DELAY", 5_000, 0, 600_000),
    protocol,
  };
}

/** The default database of every service; each may override it with its own variable. */
export const DEFAULT_DATABASE_URL = "postgres://127.0.0.1:5432/ledger";

/** A service's database URL: its own variable, else DATABASE_URL, else the default. */
export function readDatabaseUrl(env: Env, serviceVariable: string): string {
  const own = envOptional(env, serviceVariable);
  if (own) return envUrl(env, serviceVariable, own, ["postgres", "postgresql"]);
  return envUrl(env, "DATABASE_URL", DEFAULT_DATABASE_URL, ["postgres", "postgresql"]);
}

/**
 * The shared secret services use to call each other on behalf of an account (for work no client
 * request carries, such as hold expiry). Required in production; a fixed development value otherwise.
 */
export function readServiceToken(env: Env = process.env): string {
  const token = envOptional(env, "SERVICE_TOKEN");
  if (token === undefined) {
    if (env["NODE_ENV"] === "production") throw new ConfigError("SERVICE_TOKEN", "is required when NODE_ENV=production");
    return "development-service-token-not-for-production";
  }
  if (!/^[\x21-\x7e]{16,256}$/.test(token)) throw new ConfigError("SERVICE_TOKEN", "must be 16 to 256 printable characters");
  return token;
}
