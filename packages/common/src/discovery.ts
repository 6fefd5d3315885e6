import { toBinary, type DescFile, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "@ledger/proto/grpc/health/v1/health_pb.js";
import { ServerReflection as ReflectionV1 } from "@ledger/proto/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ReflectionV1alpha } from "@ledger/proto/grpc/reflection/v1alpha/reflection_pb.js";
import { appError } from "./errors.js";

// What every RPC port tells a client that has no copy of proto/: which services it offers and
// their descriptors (gRPC server reflection, v1 and its older v1alpha name, for grpcurl and
// `buf curl --reflect`), and whether it can serve now (the gRPC health protocol). Both are open,
// no API key needed (authInterceptor lets DISCOVERY_METHODS through), and rate-limited like any
// call. `listen` adds them to every port that serves RPC.

/** Full names of the methods this file serves, which authentication leaves open. */
export const DISCOVERY_METHODS = [Health, ReflectionV1, ReflectionV1alpha].flatMap((service) =>
  service.methods.map((method) => `${service.typeName}/${method.name}`),
);

/** Whether the process can serve: its readiness checks (database, NATS, ...) all pass. */
export type ReadinessProbe = () => Promise<boolean>;

/** How often an open Watch looks at readiness again, to tell its client of a change. */
const WATCH_EVERY_MS = 2_000;
/** Open Watch streams a process keeps at once; more are refused, so idle streams cannot pile up. */
const MAX_WATCHES = 1_000;
/** Requests one reflection stream may carry: a client needs a few dozen; the stream is not a channel. */
const MAX_REFLECTION_REQUESTS = 1_000;

/**
 * Registers health and reflection on `router`, after the service's own routes: reflection lists
 * whatever the router serves then. `stopping` ends open Watch streams when the server drains.
 */
export function addDiscovery(router: ConnectRouter, ready: ReadinessProbe, stopping: AbortSignal): void {
  router.service(Health, healthService(router, ready, stopping));
  // The reflection services describe themselves too, so they go in before the index is built.
  const index: { current?: DescriptorIndex } = {};
  const reflect = <R extends ReflectionRequest>(requests: AsyncIterable<R>) => {
    index.current ??= indexOf(router);
    return reflectionStream(requests, index.current);
  };
  router.service(ReflectionV1, { serverReflectionInfo: reflect });
  router.service(ReflectionV1alpha, { serverReflectionInfo: reflect });
}

/** The services a router serves, each once, in the order they were added. */
function servicesOf(router: ConnectRouter): DescService[] {
  return [...new Set(router.handlers.map((handler) => handler.service))];
}

function healthService(router: ConnectRouter, ready: ReadinessProbe, stopping: AbortSignal) {
  // Every service of a process shares its dependencies, so each answers as the whole server does;
  // "" is the server itself. Looked up per call: services are added after this one.
  const known = (name: string) => name === "" || servicesOf(router).some((service) => service.typeName === name);
  const status = async () => ((await ready()) ? ServingStatus.SERVING : ServingStatus.NOT_SERVING);
  let watches = 0;
  return {
    async check(req: { service: string }) {
      if (!known(req.service))
        throw appError(Code.NotFound, "not_found", `this server has no service ${JSON.stringify(req.service.slice(0, 200))}`);
      return { status: await status() };
    },
    async *watch(req: { service: string }, ctx: { signal: AbortSignal }) {
      if (watches >= MAX_WATCHES)
        throw appError(Code.ResourceExhausted, "rate_limited", "too many health watches are open on this server; use Check");
      watches++;
      try {
        const ended = AbortSignal.any([ctx.signal, stopping]);
        // An unknown service is watched, not refused: it may appear later (it will not here).
        let last = known(req.service) ? await status() : ServingStatus.SERVICE_UNKNOWN;
        yield { status: last };
        while (!ended.aborted) {
          await sleep(WATCH_EVERY_MS, ended);
          if (ended.aborted || last === ServingStatus.SERVICE_UNKNOWN) continue;
          const now = await status();
          if (now !== last) {
            last = now;
            yield { status: last };
          }
        }
      } finally {
        watches--;
      }
    },
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/** A server's descriptors by file name and by every fully-qualified name they declare. */
interface DescriptorIndex {
  services: string[];
  files: Map<string, DescFile>;
  symbols: Map<string, DescFile>;
  messages: Map<string, DescMessage>;
}

function indexOf(router: ConnectRouter): DescriptorIndex {
  const services = servicesOf(router);
  const index: DescriptorIndex = { services: services.map((s) => s.typeName), files: new Map(), symbols: new Map(), messages: new Map() };
  const addMessage = (message: DescMessage) => {
    index.symbols.set(message.typeName, message.file);
    index.messages.set(message.typeName, message);
    for (const field of message.fields) index.symbols.set(`${message.typeName}.${field.name}`, message.file);
    for (const nested of message.nestedMessages) addMessage(nested);
    for (const nested of message.nestedEnums) index.symbols.set(nested.typeName, message.file);
    for (const extension of message.nestedExtensions) index.symbols.set(extension.typeName, message.file);
  };
  const addFile = (file: DescFile) => {
    if (index.files.has(file.name)) return;
    index.files.set(file.name, file);
    for (const message of file.messages) addMessage(message);
    for (const en of file.enums) index.symbols.set(en.typeName, file);
    for (const extension of file.extensions) index.symbols.set(extension.typeName, file);
    for (const service of file.services) {
      index.symbols.set(service.typeName, file);
      for (const method of service.methods) index.symbols.set(`${service.typeName}.${method.name}`, file);
    }
    for (const dependency of file.dependencies) addFile(dependency);
  };
  for (const service of services) addFile(service.file);
  return index;
}

/** A reflection request as both protocol versions spell it. */
interface ReflectionRequest {
  host: string;
  messageRequest:
    | { case: "fileByFilename" | "fileContainingSymbol" | "allExtensionNumbersOfType" | "listServices"; value: string }
    | { case: "fileContainingExtension"; value: { containingType: string; extensionNumber: number } }
    | { case: undefined; value?: undefined };
}

type ReflectionAnswer =
  | { case: "fileDescriptorResponse"; value: { fileDescriptorProto: Uint8Array[] } }
  | { case: "allExtensionNumbersResponse"; value: { baseTypeName: string; extensionNumber: number[] } }
  | { case: "listServicesResponse"; value: { service: { name: string }[] } }
  | { case: "errorResponse"; value: { errorCode: number; errorMessage: string } };

/**
 * Answers each request of a reflection stream in turn. A file comes with its dependencies, each
 * sent once per stream, as the protocol asks; a name this server does not know is an error
 * response on the stream (NOT_FOUND), not the end of it.
 */
async function* reflectionStream<R extends ReflectionRequest>(requests: AsyncIterable<R>, index: DescriptorIndex) {
  const sent = new Set<string>();
  const withDependencies = (file: DescFile): ReflectionAnswer => {
    const out: Uint8Array[] = [];
    const add = (f: DescFile) => {
      if (sent.has(f.name)) return;
      sent.add(f.name);
      out.push(toBinary(FileDescriptorProtoSchema, f.proto));
      f.dependencies.forEach(add);
    };
    // The file asked for always comes first, even when an earlier answer carried it.
    sent.delete(file.name);
    add(file);
    return { case: "fileDescriptorResponse", value: { fileDescriptorProto: out } };
  };
  const notFound = (what: string): ReflectionAnswer => ({
    case: "errorResponse",
    value: { errorCode: Code.NotFound, errorMessage: `${what} not found` },
  });
  const answer = (req: ReflectionRequest): ReflectionAnswer => {
    const { messageRequest: ask } = req;
    switch (ask.case) {
      case "listServices":
        return { case: "listServicesResponse", value: { service: index.services.map((name) => ({ name })) } };
      case "fileByFilename": {
        const file = index.files.get(ask.value);
        return file ? withDependencies(file) : notFound(`file ${JSON.stringify(ask.value.slice(0, 200))}`);
      }
      case "fileContainingSymbol": {
        const file = index.symbols.get(ask.value.replace(/^\./, ""));
        return file ? withDependencies(file) : notFound(`symbol ${JSON.stringify(ask.value.slice(0, 200))}`);
      }
      case "fileContainingExtension":
        // No service of this project declares extensions.
        return notFound(`extension ${ask.value.extensionNumber} of ${JSON.stringify(ask.value.containingType.slice(0, 200))}`);
      case "allExtensionNumbersOfType":
        return index.messages.has(ask.value)
          ? { case: "allExtensionNumbersResponse", value: { baseTypeName: ask.value, extensionNumber: [] } }
          : notFound(`type ${JSON.stringify(ask.value.slice(0, 200))}`);
      default:
        return { case: "errorResponse", value: { errorCode: Code.InvalidArgument, errorMessage: "the request asks for nothing" } };
    }
  };
  let count = 0;
  for await (const req of requests) {
    if (++count > MAX_REFLECTION_REQUESTS) {
      throw new ConnectError(
        `a reflection stream carries at most ${MAX_REFLECTION_REQUESTS} requests; open another`,
        Code.ResourceExhausted,
      );
    }
    yield { validHost: req.host, originalRequest: req, messageResponse: answer(req) };
  }
}
