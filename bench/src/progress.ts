// The bench's status line.

/** One status line that rewrites itself on a terminal and is a plain line in CI logs. */
export function progress(line: string): void {
  if (process.stderr.isTTY) process.stderr.write(`\r\x1b[2K${line}`);
  else process.stderr.write(`${line}\n`);
}
export function endProgress(): void {
  if (process.stderr.isTTY) process.stderr.write("\r\x1b[2K");
}
