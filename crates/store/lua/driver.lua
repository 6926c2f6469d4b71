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
-- With `states` nil (a batch of one item) the state is loaded and not kept.
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
  if states == nil then
    return ki, a, p, cost, a.load(KEYS[ki], p)
  end
  local s = states[ki]
  if s == nil then
    s = a.load(KEYS[ki], p)
    states[ki] = s
    algo_of[ki] = a
  end
  return ki, a, p, cost, s
end

-- Decides a batch of n items at `t`, all-or-nothing: every item in order on Lua tables (an item
-- sees earlier same-key items' tentative consumption), then, only if every item admits and
-- `commit`, writes each key once with PEXPIRE = ceil(reset_after / 1000) ms (+ extra_ms) of the
-- last consuming decision on it (docs/spec/README.md, "Writes and TTL"). `item(i, states,
-- algo_of)` decodes item i and loads its key's state once (load_item's contract; a batch of
-- one item passes no tables, saving their allocation on the most common call). Appends to
-- `reply` 9 integers per item: the peek decision (allowed 1/0, remaining, reset_after,
-- retry_after or -1), the decision after consumption (the same four; equal to the peek when
-- nothing was consumed), and mark (what a refund needs); with `short`, only the 4 the caller
-- reports instead: after consumption when every item admitted and `commit`, else the peek.
-- Returns whether every item admitted.
local function decide_batch(n, t, commit, extra_ms, reply, item, short)
  if short and commit and n == 1 then
    -- One item, reported after consumption: one decide. A denied (or cost 0) decide consumes
    -- nothing and answers exactly the peek, which is what a denied batch reports.
    local ki, a, p, cost, s = item(1)
    local allowed, remaining, reset_after, retry_after = a.decide(s, p, t, cost, true)
    local k = #reply
    reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4] =
      allowed and 1 or 0, remaining, reset_after, retry_after
    if allowed and cost > 0 then
      a.save(KEYS[ki], s, ttl_ms(reset_after, extra_ms))
    end
    return allowed
  end
  local states = {} -- key index -> state table
  local algo_of = {} -- key index -> algorithm table
  local reset_of = {} -- key index -> reset_after of the last consuming decision
  local all = true
  local first = #reply
  for i = 1, n do
    local ki, a, p, cost, s = item(i, states, algo_of)
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
  if short then
    -- Compact in place (each destination lies before its source), then drop the tail.
    local from = 0
    if all and commit then
      from = 4
    end
    for i = 1, n do
      local src, dst = first + (i - 1) * 9 + from, first + (i - 1) * 4
      reply[dst + 1], reply[dst + 2], reply[dst + 3], reply[dst + 4] =
        reply[src + 1], reply[src + 2], reply[src + 3], reply[src + 4]
    end
    for k = first + 9 * n, first + 4 * n + 1, -1 do
      reply[k] = nil
    end
  end
  return all
end
