import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";

/** A cleartext HTTP/2 server of a test's own, answering every stream with `onStream`. */
export interface Http2TestServer {
  url: string;
  /** Every connection it has accepted and not yet seen closed. */
  sessions: Set<http2.ServerHttp2Session>;
  /** Ends its connections (clients' kept-alive ones included) and stops listening. */
  close(): Promise<void>;
}

/**
 * Starts a plain HTTP/2 server on 127.0.0.1 and a free port, for peers that misbehave in ways a
 * real service does not (never answering, resetting, answering what Connect does not). Each
 * stream gets an error listener first, so a reset by the client cannot end the test process.
 */
export async function startHttp2Server(
  onStream: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void,
): Promise<Http2TestServer> {
  const server = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  server.on("stream", (stream, headers) => {
    stream.on("error", () => {});
    onStream(stream, headers);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    sessions,
    close: async () => {
      for (const session of sessions) session.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
