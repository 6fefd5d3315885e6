import { pino, type Logger } from "pino";

export type { Logger } from "pino";

/**
 * The process logger: JSON lines on stdout. Anything that looks like a credential is redacted by
 * path, as a second line of defence; the first is never logging requests' headers or bodies.
 */
export function createLogger(service: string, level = process.env["LOG_LEVEL"] ?? "info"): Logger {
  return pino({
    name: service,
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: ["authorization", "*.authorization", "api_key", "*.api_key", "apiKey", "*.apiKey", "secret", "*.secret"],
      censor: "[redacted]",
    },
  });
}
