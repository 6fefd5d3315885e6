/** A response as a test sees it. */
export interface ApiResponse {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: tests read arbitrary JSON shapes and asserting on them is the point; `unknown` would need a cast at every one of hundreds of reads.
  body: any;
  headers: Headers;
}

/** A REST client bound to one API key. */
export interface Api {
  request(
    method: string,
    path: string,
    init?: { body?: unknown; raw?: string; query?: Record<string, string>; headers?: Record<string, string> },
  ): Promise<ApiResponse>;
  get(path: string, query?: Record<string, string>, headers?: Record<string, string>): Promise<ApiResponse>;
  post(path: string, body?: unknown, headers?: Record<string, string>): Promise<ApiResponse>;
  put(path: string, body?: unknown, headers?: Record<string, string>): Promise<ApiResponse>;
}

/** Makes a REST client for `baseUrl` (ending in /v1) that sends `apiKey`. */
export function restClient(baseUrl: string, apiKey: string | undefined): Api {
  const request: Api["request"] = async (method, path, init = {}) => {
    const url = new URL(baseUrl + path);
    for (const [k, v] of Object.entries(init.query ?? {})) url.searchParams.set(k, v);
    const headers: Record<string, string> = { ...(apiKey ? { authorization: apiKey } : {}), ...(init.headers ?? {}) };
    let body: string | undefined = init.raw;
    if (init.body !== undefined) {
      body = JSON.stringify(init.body);
      headers["content-type"] = "application/json";
    }
    const res = await fetch(url, { method, headers, ...(body !== undefined ? { body } : {}) });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Left as text: a test asserting on a JSON shape will fail and show it.
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };
  return {
    request,
    get: (path, query, headers) => request("GET", path, { ...(query ? { query } : {}), ...(headers ? { headers } : {}) }),
    post: (path, body, headers) => request("POST", path, { body: body ?? {}, ...(headers ? { headers } : {}) }),
    put: (path, body, headers) => request("PUT", path, { body: body ?? {}, ...(headers ? { headers } : {}) }),
  };
}
