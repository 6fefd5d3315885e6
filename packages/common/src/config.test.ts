import { describe, expect, it } from "vitest";
import { ConfigError, readTracingConfig } from "./config.js";

describe("readTracingConfig", () => {
  it("leaves tracing off unless an OTLP endpoint is set", () => {
    expect(readTracingConfig({})).toBeUndefined();
    expect(readTracingConfig({ OTEL_SERVICE_NAME: "ledger-eu", OTEL_EXPORTER_OTLP_HEADERS: "x=1" })).toBeUndefined();
    expect(readTracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_SDK_DISABLED: "true" })).toBeUndefined();
  });

  it("adds /v1/traces to the base endpoint and takes the traces endpoint as given", () => {
    expect(readTracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" })).toEqual({
      tracesUrl: "http://collector:4318/v1/traces",
      serviceName: undefined,
      headers: {},
      exportDelayMs: 5_000,
    });
    const both = readTracingConfig({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://traces.example/otlp",
      OTEL_SERVICE_NAME: "ledger-eu",
      OTEL_BSP_SCHEDULE_DELAY: "200",
    });
    expect(both).toMatchObject({ tracesUrl: "https://traces.example/otlp", serviceName: "ledger-eu", exportDelayMs: 200 });
  });

  it("reads export headers, the traces-specific ones winning", () => {
    const config = readTracingConfig({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
      OTEL_EXPORTER_OTLP_HEADERS: "Api-Key=a%20b, tenant=t1",
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: "tenant=t2",
    });
    expect(config?.headers).toEqual({ "api-key": "a b", tenant: "t2" });
  });

  it("stops the start on a bad value, naming the variable and never echoing a header value", () => {
    const error = (env: Record<string, string>) => {
      try {
        readTracingConfig(env);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as Error).message;
      }
      throw new Error("no error");
    };
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" })).toMatch(/OTEL_EXPORTER_OTLP_ENDPOINT/);
    expect(error({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "ftp://collector" })).toMatch(/OTEL_EXPORTER_OTLP_TRACES_ENDPOINT/);
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toMatch(/OTEL_EXPORTER_OTLP_PROTOCOL must be http\/json/);
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_BSP_SCHEDULE_DELAY: "soon" })).toMatch(/OTEL_BSP_SCHEDULE_DELAY/);
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "maybe" })).toMatch(/OTEL_SDK_DISABLED/);
    const headers = error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_HEADERS: "api-key=%E0%A4%A-secret" });
    expect(headers).toMatch(/OTEL_EXPORTER_OTLP_HEADERS/);
    expect(headers).not.toMatch(/secret/);
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_TRACES_HEADERS: "just-a-token" })).toMatch(/OTEL_EXPORTER_OTLP_TRACES_HEADERS/);
  });
});
