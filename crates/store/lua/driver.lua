-- driver.lua: the prologue shared by the two drivers, batch.lua and refund.lua. Appended after
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
