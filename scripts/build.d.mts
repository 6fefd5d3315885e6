// Types of scripts/build.mjs, which is plain JavaScript so that it runs before anything is compiled.
/** dist/<name>.js from each source entry point. */
export declare const ENTRIES: Record<string, string>;
/** Whether dist/ is as new as every input of its last build. */
export declare function isCurrent(): boolean;
/** Compiles every entry point; resolves to the milliseconds it took. */
export declare function buildAll(): Promise<number>;
/** `text` (a compiled module) with the non-ASCII characters of its comments and regular expressions escaped. */
export declare function asciiSource(text: string, path?: string): string;
