-- The REST cells of `pnpm bench`: wrk's closed loop (each connection sends its next request when
-- the last one answered), with the bodies made here so that every request names entities drawn at
-- random, as the RPC cells' do. bench/src/wrk.ts runs it and reads the line `done` prints.
--
-- wrk <options> -s rest-load.lua http://host:port/v1 -- <workload> <file of entity ids> <hot entity> [<search values>]
-- The history workloads (as-of, statement) take the file of the history entity's moments (one
-- posted_at a line, oldest first) and the history entity in place of the entity ids and the hot one.
--
-- Each wrk thread runs this file in a Lua state of its own: `setup` and `done` run in the main
-- thread, `init`, `request` and `response` in each worker thread, whose globals `done` reads.

local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

-- Per worker thread: read by `done` through thread:get.
ok_calls = 0 -- answered 2xx, and for a batch with no refused item
units = 0 -- what the tx/s column counts: transfers (100 a batch call), or hold pairs (captures)
errors = {} -- failures by code: the error's code from the answer, else http_<status>

local workload, entities, hot, base, search_values
local held = {} -- holds created and not yet captured: { hold_id, entity_id }, first in first out
local held_first, held_next = 1, 1
local turn = 0

function init(args)
  workload, hot, search_values = args[1], args[3], tonumber(args[4] or "0")
  entities = {}
  for line in assert(io.open(args[2])):lines() do
    if line ~= "" then
      entities[#entities + 1] = line
    end
  end
  base = wrk.path:gsub("/$", "")
  wrk.headers["Content-Type"] = "application/json"
  math.randomseed(os.time() * 1000 + id)
end

local function entity()
  return entities[math.random(#entities)]
end

-- `n` distinct entities (entities outnumber n many times over).
local function distinct(n)
  local chosen, seen = {}, {}
  while #chosen < n do
    local e = entity()
    if not seen[e] then
      seen[e] = true
      chosen[#chosen + 1] = e
    end
  end
  return chosen
end

local function transfer_json(from, to)
  return '{"description":"bench","status":"posted","amount":1,"account":{"from":"' .. from .. '","to":"' .. to .. '"}}'
end

local function post(path, body)
  return wrk.format("POST", base .. path, nil, body)
end

local function get(path)
  return wrk.format("GET", base .. path)
end

local bodies = {
  transfer = function()
    local p = distinct(2)
    return post("/transaction", transfer_json(p[1], p[2]))
  end,
  deposit = function()
    return post("/entity/fund", '{"entity_id":"' .. entity() .. '","amount":1,"description":"bench"}')
  end,
  -- Exactly every other request debits the hot entity.
  hot = function()
    turn = turn + 1
    local p = distinct(2)
    if turn % 2 == 1 then
      p[1] = hot
    end
    return post("/transaction", transfer_json(p[1], p[2]))
  end,
  -- A hold, then its capture in full to another entity: a connection sends a capture whenever a
  -- created hold waits for one, and a new hold otherwise.
  hold = function()
    if held_first < held_next then
      local h = held[held_first]
      held[held_first] = nil
      held_first = held_first + 1
      local to = entity()
      while to == h[2] do
        to = entity()
      end
      return post("/hold/capture", '{"hold_id":"' .. h[1] .. '","amount":2,"destination_entity_id":"' .. to .. '"}')
    end
    return post("/hold", '{"entity_id":"' .. entity() .. '","amount":2,"description":"bench"}')
  end,
  multileg = function()
    local legs = distinct(10)
    local entries = {}
    for i, e in ipairs(legs) do
      entries[i] = '{"entity_id":"' .. e .. '","direction":"' .. (i <= 5 and "debit" or "credit") .. '","amount":2}'
    end
    return post("/transaction", '{"description":"bench","status":"posted","entries":[' .. table.concat(entries, ",") .. "]}")
  end,
  -- The read workload: the groups whose metadata k is one of `search_values` values, v0 to v<n-1>.
  search = function()
    return get("/transaction/groups?metadata%5Bk%5D=v" .. math.random(0, search_values - 1))
  end,
}

local function batch(from_hot)
  return function()
    local items = {}
    for i = 1, 100 do
      local from = from_hot and hot or entity()
      local to = entity()
      while to == from do
        to = entity()
      end
      items[i] = transfer_json(from, to)
    end
    return post("/transaction/batch", '{"transactions":[' .. table.concat(items, ",") .. "]}")
  end
end
bodies["batch"] = batch(false)
bodies["batch-hot"] = batch(true)

-- The history workloads: `entities` holds the history entity's moments and `hot` the entity.
local function get(path)
  return wrk.format("GET", base .. path)
end
bodies["as-of"] = function()
  return get("/entity?entity_id=" .. hot .. "&as_of=" .. entity())
end
-- A window holding at least a full page (1,000): from a random leg's moment to the moment 2,000 legs on.
bodies["statement"] = function()
  local start = math.random(#entities - 2000)
  return get("/entity/statement?entity_id=" .. hot .. "&from=" .. entities[start] .. "&to=" .. entities[start + 2000] .. "&limit=1000")
end

function request()
  return bodies[workload]()
end

local function failed(code)
  errors[code] = (errors[code] or 0) + 1
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    return failed(body:match('"code":"([^"]+)"') or ("http_" .. status))
  end
  if workload == "statement" and not body:find('"has_next":true', 1, true) then
    return failed("short_statement_page")
  end
  if workload == "batch" or workload == "batch-hot" then
    -- A batch answers 200 with its refused items counted in `failed`: none is expected.
    if tonumber(body:match('"failed":(%d+)')) ~= 0 then
      return failed("item_" .. (body:match('"code":"([^"]+)"') or "error"))
    end
    units = units + 100
  elseif workload == "search" then
    -- Every value was seeded: a page without a group is a wrong answer.
    if not body:find('"transaction_group_id":', 1, true) then
      return failed("empty_page")
    end
    units = units + 1
  elseif workload == "hold" then
    -- A capture answers the hold and its `transaction`; a creation, the hold alone.
    if body:find('"transaction":', 1, true) then
      units = units + 1
    else
      local hold_id, entity_id = body:match('"hold_id":"([^"]+)"'), body:match('"entity_id":"([^"]+)"')
      if not (hold_id and entity_id) then
        return failed("bad_response")
      end
      held[held_next] = { hold_id, entity_id }
      held_next = held_next + 1
    end
  else
    units = units + 1
  end
  ok_calls = ok_calls + 1
end

-- One line for bench/src/wrk.ts: the counts of every thread, wrk's latency percentiles (µs, of
-- every answered request) and its socket errors, and the CPU seconds this wrk process used.
function done(summary, latency, requests)
  local ok, done_units, codes = 0, 0, {}
  for _, thread in ipairs(threads) do
    ok = ok + thread:get("ok_calls")
    done_units = done_units + thread:get("units")
    for code, n in pairs(thread:get("errors")) do
      codes[code] = (codes[code] or 0) + n
    end
  end
  for _, kind in ipairs({ "connect", "read", "write", "timeout" }) do
    if summary.errors[kind] > 0 then
      codes[kind] = (codes[kind] or 0) + summary.errors[kind]
    end
  end
  local listed = {}
  for code, n in pairs(codes) do
    listed[#listed + 1] = string.format("%q:%d", code, n)
  end
  io.write(
    string.format(
      'BENCH_WRK {"ok":%d,"units":%d,"requests":%d,"durationUs":%d,"p50Us":%d,"p95Us":%d,"p99Us":%d,"maxUs":%d,"cpuSeconds":%.3f,"errors":{%s}}\n',
      ok,
      done_units,
      summary.requests,
      summary.duration,
      latency:percentile(50),
      latency:percentile(95),
      latency:percentile(99),
      latency.max,
      os.clock(),
      table.concat(listed, ",")
    )
  )
end
