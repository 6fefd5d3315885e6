import { describe, expect, it } from "vitest";
import { ConfigError, readInfraConfig, readTracingConfig } from "./config.js";

describe("readInfraConfig", () => {
  it("limits RPC bodies to 4 MiB and rates as the gateway does, unless told otherwise", () => {
    expect(readInfraConfig({})).toMatchObject({ rpcBodyLimitBytes: 4 * 1024 * 1024, rateLimitPerSecond: 1_000, rateLimitBurst: 2_000 });
    const set = readInfraConfig({ RPC_BODY_LIMIT_BYTES: "65536", GATEWAY_RATE_LIMIT_PER_SECOND: "0", GATEWAY_RATE_LIMIT_BURST: "7" });
    expect(set).toMatchObject({ rpcBodyLimitBytes: 65_536, rateLimitPerSecond: 0, rateLimitBurst: 7 });
    expect(() => readInfraConfig({ RPC_BODY_LIMIT_BYTES: "10" })).toThrow(ConfigError);
    expect(() => readInfraConfig({ RPC_BODY_LIMIT_BYTES: "4MB" })).toThrow(/RPC_BODY_LIMIT_BYTES/);
  });

  it("closes connections without headers after 10 s and idle ones after 65 s, unless told otherwise", () => {
    expect(readInfraConfig({})).toMatchObject({ headerTimeoutMs: 10_000, idleTimeoutMs: 65_000 });
    expect(readInfraConfig({ HTTP_HEADER_TIMEOUT_MS: "500", HTTP_IDLE_TIMEOUT_MS: "2000" })).toMatchObject({
      headerTimeoutMs: 500,
      idleTimeoutMs: 2_000,
    });
    expect(() => readInfraConfig({ HTTP_HEADER_TIMEOUT_MS: "0" })).toThrow(/HTTP_HEADER_TIMEOUT_MS/);
    expect(() => readInfraConfig({ HTTP_IDLE_TIMEOUT_MS: "1m" })).toThrow(/HTTP_IDLE_TIMEOUT_MS/);
  });

  it("takes the unary fast path unless RPC_UNARY_FAST_PATH says false, and stops on a value that is neither", () => {
    expect(readInfraConfig({}).rpcUnaryFastPath).toBe(true);
    expect(readInfraConfig({ RPC_UNARY_FAST_PATH: "false" }).rpcUnaryFastPath).toBe(false);
    expect(() => readInfraConfig({ RPC_UNARY_FAST_PATH: "off" })).toThrow(ConfigError);
    expect(() => readInfraConfig({ RPC_UNARY_FAST_PATH: "off" })).toThrow(
      'configuration: RPC_UNARY_FAST_PATH must be true or false, got "off"',
    );
  });
});

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
      protocol: "http/protobuf",
    });
    const both = readTracingConfig({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://traces.example/otlp",
      OTEL_SERVICE_NAME: "ledger-eu",
      OTEL_BSP_SCHEDULE_DELAY: "200",
    });
    expect(both).toMatchObject({ tracesUrl: "https://traces.example/otlp", serviceName: "ledger-eu", exportDelayMs: 200 });
  });

  it("exports protobuf unless told JSON, the traces-specific protocol winning", () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" };
    expect(readTracingConfig(base)?.protocol).toBe("http/protobuf");
    expect(readTracingConfig({ ...base, OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" })?.protocol).toBe("http/json");
    expect(
      readTracingConfig({ ...base, OTEL_EXPORTER_OTLP_PROTOCOL: "http/json", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/protobuf" })
        ?.protocol,
    ).toBe("http/protobuf");
    expect(
      readTracingConfig({ ...base, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json" })?.protocol,
    ).toBe("http/json");
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
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toMatch(
      /OTEL_EXPORTER_OTLP_PROTOCOL must be http\/protobuf or http\/json/,
    );
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "json" })).toMatch(
      /OTEL_EXPORTER_OTLP_TRACES_PROTOCOL/,
    );
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_BSP_SCHEDULE_DELAY: "soon" })).toMatch(/OTEL_BSP_SCHEDULE_DELAY/);
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "maybe" })).toMatch(/OTEL_SDK_DISABLED/);
    const headers = error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_HEADERS: "api-key=%E0%A4%A-secret" });
    expect(headers).toMatch(/OTEL_EXPORTER_OTLP_HEADERS/);
    expect(headers).not.toMatch(/secret/);
    expect(error({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_TRACES_HEADERS: "just-a-token" })).toMatch(
      /OTEL_EXPORTER_OTLP_TRACES_HEADERS/,
    );
  });
});
