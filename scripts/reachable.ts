// Whether a server answers, for `pnpm start` deciding what it must bring itself (PGlite, nats-server).
import { connect } from "node:net";

/** Whether something accepts TCP connections at host:port within a second. */
export function reachable(host: string, port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect(port, host);
    socket.setTimeout(1_000);
    socket.once("connect", () => {
      socket.destroy();
      done(true);
    });
    socket.once("error", () => done(false));
    socket.once("timeout", () => {
      socket.destroy();
      done(false);
    });
  });
}
