import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

// What scripts/docs-links.test.ts checks in Markdown: relative links and the heading anchors they
// point to, read as GitHub reads them.

/** The text outside fenced code blocks, line by line (a link inside a code sample is not a link). */
function proseLines(markdown: string): string[] {
  const lines: string[] = [];
  let fence: string | undefined;
  for (const line of markdown.split("\n")) {
    const opener = /^\s*(```|~~~)/.exec(line)?.[1];
    if (opener && (fence === undefined || fence === opener)) {
      fence = fence === undefined ? opener : undefined;
      continue;
    }
    if (fence === undefined) lines.push(line);
  }
  return lines;
}

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens. */
export function headingSlug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/`/g, "")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

/** Every anchor a Markdown file offers; a repeated heading gets `-1`, `-2`, ... as on GitHub. */
export function anchorsOf(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of proseLines(markdown)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const slug = headingSlug(heading);
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/** The relative link targets of a Markdown file (`path`, `path#anchor` or `#anchor`). */
export function relativeLinks(markdown: string): string[] {
  const targets: string[] = [];
  for (const line of proseLines(markdown)) {
    const text = line.replace(/`[^`]*`/g, "");
    for (const match of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = match[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: and other schemes
      targets.push(target);
    }
  }
  return targets;
}

/** What is wrong with each relative link of `file`, as `file: target (why)`. */
export function brokenLinks(root: string, file: string): string[] {
  const problems: string[] = [];
  const markdown = readFileSync(join(root, file), "utf8");
  for (const target of relativeLinks(markdown)) {
    const [pathPart, anchor] = target.split("#", 2) as [string, string | undefined];
    const path = pathPart === "" ? join(root, file) : resolve(dirname(join(root, file)), decodeURIComponent(pathPart));
    if (!existsSync(path)) {
      problems.push(`${file}: ${target} (no such file)`);
      continue;
    }
    if (anchor === undefined || anchor === "") continue;
    if (statSync(path).isDirectory() || !path.endsWith(".md")) {
      problems.push(`${file}: ${target} (an anchor into something that is not a Markdown file)`);
      continue;
    }
    if (!anchorsOf(readFileSync(path, "utf8")).has(decodeURIComponent(anchor))) {
      problems.push(`${file}: ${target} (no heading with that anchor in ${relative(root, path)})`);
    }
  }
  return problems;
}
