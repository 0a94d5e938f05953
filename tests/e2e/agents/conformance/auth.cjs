// Preloaded into the MCP conformance suite (node --require): every request it sends carries
// the agent's bearer token, as every Kura client must; nothing else about a request changes.
// The suite has no header option, and both of its HTTP paths (fetch, and undici's request)
// go through undici's global dispatcher, which this wraps.
const token = process.env.KURA_CONFORMANCE_TOKEN;
if (!token) {
  throw new Error("KURA_CONFORMANCE_TOKEN is not set");
}
const { Agent, setGlobalDispatcher } = require("undici");

function withAuth(headers) {
  const value = `Bearer ${token}`;
  if (headers == null) {
    return { authorization: value };
  }
  if (Array.isArray(headers)) {
    // A flat [name, value, name, value, ...] list.
    for (let i = 0; i < headers.length; i += 2) {
      if (String(headers[i]).toLowerCase() === "authorization") {
        return headers;
      }
    }
    return [...headers, "authorization", value];
  }
  if (typeof headers[Symbol.iterator] === "function" && typeof headers !== "string") {
    const out = {};
    for (const [k, v] of headers) {
      out[k] = v;
    }
    headers = out;
  }
  const has = Object.keys(headers).some((k) => k.toLowerCase() === "authorization");
  return has ? headers : { ...headers, authorization: value };
}

setGlobalDispatcher(
  new Agent().compose((dispatch) => (opts, handler) => dispatch({ ...opts, headers: withAuth(opts.headers) }, handler)),
);
