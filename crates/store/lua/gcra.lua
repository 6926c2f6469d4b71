-- gcra.lua: GCRA (virtual scheduling, ATM Forum TM 4.0 annex C), docs/spec/gcra.md
-- ("Decision", "Backwards time", "Writes and TTL"). A library file (no KEYS/ARGV of its own).
--
-- State: tat (us) and tat_ticks (0 <= tat_ticks < den), i.e. the theoretical arrival time
-- tat x den + tat_ticks in ticks, stored as that ONE integer (pack2 with m = den); when den >
-- 2^23 as the string '<tat>:<tat_ticks>'. A missing key is (0, 0).
-- p = {limit, period, burst, num, den}: interval = num ticks per unit, tau = burst x num <= 2^51.
-- decide(s, p, now, cost, consume) -> allowed, remaining, reset_after, retry_after (-1 = none),
--   mark (unused, 0).
-- refund(s, p, now, cost, mark): moves tat back by cost x interval ticks (not before now).

local gcra = {}

function gcra.load(key, p)
  local v = redis.call('GET', key)
  if not v then
    return { tat = 0, tat_ticks = 0, den = p.den, exists = false }
  end
  local tat, tat_ticks = split2(v)
  if not tat then
    tat, tat_ticks = unpack2(v, p.den)
  end
  return { tat = tat, tat_ticks = tat_ticks, den = p.den, exists = true }
end

-- Packed with the den the state was loaded with (one key, one quota, in practice).
function gcra.save(key, s, ttl)
  save_value(key, pack2(s.tat, s.den, s.tat_ticks)
    or string.format('%d:%d', s.tat, s.tat_ticks), ttl)
end

-- tat - tau rounded up to a whole microsecond (0 when negative), without forming tat x den.
local function earliest(s, tau_us, tau_rem)
  local e = max(s.tat - tau_us, 0)
  if s.tat >= tau_us and s.tat_ticks > tau_rem then
    e = e + 1
  end
  return e
end

-- Ticks by which tat is ahead of `now` (0 when tat is past); <= tau once now >= earliest.
local function ahead_at(s, den, now)
  if s.tat < now then
    return 0
  end
  return (s.tat - now) * den + s.tat_ticks
end

function gcra.decide(s, p, now, cost, consume)
  local interval, den = p.num, p.den
  local tau = p.burst * interval
  local tau_us = fdiv(tau, den)
  now = max(now, earliest(s, tau_us, tau - tau_us * den))
  local ahead = ahead_at(s, den, now)
  local new = ahead + cost * interval -- <= 2 tau
  local allowed = new <= tau
  local ahead_after = ahead
  if allowed and consume then
    local q = fdiv(new, den)
    s.tat = now + q
    s.tat_ticks = new - q * den
    ahead_after = new
  end
  local retry_after = -1
  if not allowed then
    retry_after = cdiv(new - tau, den)
  end
  return allowed, fdiv(tau - ahead_after, interval), cdiv(ahead_after, den), retry_after, 0
end

function gcra.refund(s, p, now, cost, mark)
  local interval, den = p.num, p.den
  local tau = p.burst * interval
  local tau_us = fdiv(tau, den)
  now = max(now, earliest(s, tau_us, tau - tau_us * den))
  local ahead = max(ahead_at(s, den, now) - cost * interval, 0)
  local q = fdiv(ahead, den)
  s.tat = now + q
  s.tat_ticks = ahead - q * den
  return true
end
