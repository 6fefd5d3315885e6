/**
 * This process's attempts from claim to HTTP answer: what `WEBHOOK_CONCURRENCY` counts, in all and
 * per destination. A slot frees when the answer arrives, before the attempt's outcome is written.
 */
export class SendingSlots {
  /** One promise per attempt waiting for its answer, resolved when the answer frees its slot. */
  private readonly sending = new Set<Promise<void>>();
  /** Per destination, this process's attempts waiting for an answer. */
  private readonly sendingTo = new Map<string, number>();

  /** `onFree` runs each time a slot frees. */
  constructor(private readonly onFree: () => void) {}

  /** Attempts waiting for their answer. */
  get size(): number {
    return this.sending.size;
  }

  /** Attempts to destination `endpointId` waiting for their answer. */
  to(endpointId: string): number {
    return this.sendingTo.get(endpointId) ?? 0;
  }

  /** Takes a slot for an attempt to `endpointId`; the answer frees it: the first call does, later ones change nothing. */
  take(endpointId: string): () => void {
    let free!: () => void;
    const slot = new Promise<void>((resolve) => (free = resolve));
    this.sending.add(slot);
    this.sendingTo.set(endpointId, this.to(endpointId) + 1);
    return () => {
      if (!this.sending.delete(slot)) return;
      const left = this.sendingTo.get(endpointId)! - 1;
      if (left === 0) this.sendingTo.delete(endpointId);
      else this.sendingTo.set(endpointId, left);
      free();
      this.onFree();
    };
  }

  /** Resolves when a slot frees. */
  oneFrees(): Promise<void> {
    return Promise.race(this.sending);
  }

  /** Resolves once every slot taken so far has freed. */
  allFree(): Promise<unknown> {
    return Promise.allSettled([...this.sending]);
  }
}
