/**
 * A sleep that another part of the process can cut short: background loops (the outbox relay,
 * delivery workers) poll on a timer but start at once when new work is announced.
 */
export function wakeableSleep(): { sleep(ms: number): Promise<void>; wake(): void } {
  let wakeUp: (() => void) | undefined;
  return {
    sleep: (ms) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(done, ms);
        function done() {
          clearTimeout(timer);
          wakeUp = undefined;
          resolve();
        }
        wakeUp = done;
      }),
    wake: () => wakeUp?.(),
  };
}
