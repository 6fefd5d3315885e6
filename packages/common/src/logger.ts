import { pino, type DestinationStream, type Logger } from "pino";
import { activeTraceIds } from "./tracing.js";

export type { Logger } from "pino";

/**
 * The process logger: JSON lines on stdout. Anything that looks like a credential is redacted by
 * path, as a second line of defence; the first is never logging requests' headers or bodies.
 * A line written under a traced request's span carries its `trace_id` and `span_id`, so a log
 * line leads to its trace and back. `destination` replaces stdout (tests).
 */
export function createLogger(service: string, level = process.env["LOG_LEVEL"] ?? "info", destination?: DestinationStream): Logger {
  const options = {
    name: service,
    level,
    base: { service },
    mixin: () => activeTraceIds() ?? {},
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: ["authorization", "*.authorization", "api_key", "*.api_key", "apiKey", "*.apiKey", "secret", "*.secret"],
      censor: "[redacted]",
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
