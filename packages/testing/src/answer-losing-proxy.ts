import { connect, createServer, type Server, type Socket } from "node:net";

/** A TCP proxy in front of Postgres that can lose the answer to one chosen statement. */
export interface AnswerLosingProxy {
  /** The database URL through the proxy. */
  url: string;
  /**
   * Cuts every connection open now, then loses the answer to the next statement whose text
   * contains the marker. Connections are cut first because a statement prepared on one is sent by
   * name, and the proxy knows the statement by its text, which only a fresh connection sends.
   */
  arm(): void;
  /** Whether an answer has been lost since the proxy started. */
  fired(): boolean;
  close(): Promise<void>;
}

/**
 * Starts a proxy to the Postgres at `target`. Once armed, it passes the next statement containing
 * `marker` (and whatever the client sends within the next 300 ms, such as a COMMIT) to Postgres,
 * drops every answer from the first CommandComplete after that statement was sent, and then cuts
 * the connection: a real server, a real commit, a real lost connection. Until then it passes
 * everything both ways. The statements sent before the marked one should have been answered by
 * then: the first CommandComplete after it is taken for its own.
 */
export function answerLosingProxy(target: URL, marker: string): Promise<AnswerLosingProxy> {
  let armed = false;
  let fired = false;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    // Postgres's answers as whole messages (a type byte, then a length that counts itself), so
    // the proxy can tell where the statement's CommandComplete is.
    let pending = Buffer.alloc(0);
    let markedSent = false;
    let swallowing = false;
    client.on("data", (chunk) => {
      if (armed && chunk.includes(marker)) {
        armed = false;
        markedSent = true;
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (!swallowing && pending.length >= 5) {
        const length = 1 + pending.readInt32BE(1);
        if (pending.length < length) break;
        const message = pending.subarray(0, length);
        pending = pending.subarray(length);
        if (markedSent && message[0] === "C".charCodeAt(0)) {
          // The statement ran. Its answer, and those of whatever follows it (a COMMIT already
          // sent, or sent in the next moments), go nowhere; the connection dies after that.
          swallowing = true;
          fired = true;
          setTimeout(() => {
            client.destroy();
            upstream.destroy();
          }, 300);
          break;
        }
        client.write(message);
      }
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const address = server.address() as { port: number };
      const url = new URL(target);
      url.hostname = "127.0.0.1";
      url.port = String(address.port);
      resolve({
        url: url.toString(),
        arm: () => {
          for (const s of sockets) s.destroy();
          armed = true;
        },
        fired: () => fired,
        close: async () => {
          for (const s of sockets) s.destroy();
          await new Promise((done) => server.close(done));
        },
      });
    }),
  );
}
