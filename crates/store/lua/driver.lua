-- driver.lua: the prologue shared by the drivers, batch.lua, multi.lua and refund.lua. Appended after
-- common.lua and the algorithm files, right before the driver; reads ARGV[1] and the item
-- values, which both drivers lay out alike (see their headers).

local ALGORITHMS = { fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra }

-- ARGV[1]: now in microseconds since the Unix epoch, or '' to read the server clock (TIME).
local now
if ARGV[1] == '' then
  now = server_now()
else
  now = tonumber(ARGV[1])
end

-- Decodes the item whose values follow ARGV[b] (key index, algorithm, limit, period, burst,
-- num, den, cost) and loads its key's state, once per key: later items on the same key share
-- the state table in `states` (key index -> state) and `algo_of` (key index -> algorithm).
-- Returns key index, algorithm table, parameters p, cost, state.
local function load_item(b, states, algo_of)
  local ki = tonumber(ARGV[b + 1])
  local a = ALGORITHMS[tonumber(ARGV[b + 2])]
  local p = {
    limit = tonumber(ARGV[b + 3]),
    period = tonumber(ARGV[b + 4]),
    burst = tonumber(ARGV[b + 5]),
    num = tonumber(ARGV[b + 6]),
    den = tonumber(ARGV[b + 7]),
  }
  local cost = tonumber(ARGV[b + 8])
  local s = states[ki]
  if s == nil then
    s = a.load(KEYS[ki], p)
    states[ki] = s
    algo_of[ki] = a
  end
  return ki, a, p, cost, s
end

-- Decides the batch whose n items follow ARGV[b] (8 values each, key indices into KEYS) at
-- `t`, all-or-nothing: every item in order on Lua tables (an item sees earlier same-key items'
-- tentative consumption), then, only if every item admits and `commit`, writes each key once
-- with PEXPIRE = ceil(reset_after / 1000) ms (+ extra_ms) of the last consuming decision on it
-- (docs/spec/README.md, "Writes and TTL"). Appends to `reply` 9 integers per item: the peek
-- decision (allowed 1/0, remaining, reset_after, retry_after or -1), the decision after
-- consumption (the same four; equal to the peek when nothing was consumed), and mark (what a
-- refund needs). Returns whether every item admitted.
local function decide_batch(b, n, t, commit, extra_ms, reply)
  local states = {} -- key index -> state table
  local algo_of = {} -- key index -> algorithm table
  local reset_of = {} -- key index -> reset_after of the last consuming decision
  local all = true
  local first = #reply
  for i = 1, n do
    local ki, a, p, cost, s = load_item(b + (i - 1) * 8, states, algo_of)
    local allowed, remaining, reset_after, retry_after, mark = a.decide(s, p, t, cost, false)
    local k = first + (i - 1) * 9
    reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4] =
      allowed and 1 or 0, remaining, reset_after, retry_after
    if allowed and cost > 0 then
      allowed, remaining, reset_after, retry_after, mark = a.decide(s, p, t, cost, true)
      reset_of[ki] = reset_after
    elseif not allowed then
      all = false
    end
    reply[k + 5], reply[k + 6], reply[k + 7], reply[k + 8], reply[k + 9] =
      allowed and 1 or 0, remaining, reset_after, retry_after, mark
  end
  if all and commit then
    for ki, reset_after in pairs(reset_of) do
      algo_of[ki].save(KEYS[ki], states[ki], ttl_ms(reset_after, extra_ms))
    end
  end
  return all
end
