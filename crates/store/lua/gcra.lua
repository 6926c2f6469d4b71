-- gcra.lua: GCRA (virtual scheduling, ATM Forum TM 4.0 annex C), docs/spec/gcra.md
-- ("Decision", "Backwards time", "Writes and TTL"). A library file (no KEYS/ARGV of its own).
--
-- State: tat (us), tat_ticks (0 <= tat_ticks < den), i.e. the theoretical arrival time
-- tat x den + tat_ticks in ticks, and last_update (us, the effective now of the last
-- admission, never after tat). Stored (docs/redis.md, "Values") as
-- - '-<c><tat x den + tat_ticks as 16 digits>' (one negative integer, which Redis keeps inside
--   the key's object: 56 B) when the last admission left the key c whole cells ahead of
--   last_update, 1 <= c <= 921 (tat - last_update = c x interval ticks exactly) and
--   tat x den + tat_ticks < 2^53 (den 1 until the year 2255): at most -9219999999999999999,
--   within 64 bits. The sign tells it from every earlier form (none is negative);
-- - else '<tat x den + tat_ticks>:<tat - last_update>' (pack2 with m = den; the second number is
--   short, at most burst x T in us), or '<tat>:<tat_ticks>:<tat - last_update>' when
--   den > 2^23; ';<last_scheduled_at - last_update>' is appended (and the compact form not
--   used) while a reservation for later lies ahead.
-- A value of a version without last_update (one non-negative packed integer, or
-- '<tat>:<tat_ticks>' for den > 2^23) reads with last_update = 0. A missing key is (0, 0, 0).
-- p = {limit, period, burst, num, den}: interval = num ticks per unit, tau = burst x num <= 2^51.
-- decide(s, p, now, cost, consume) -> allowed, remaining, reset_after, retry_after (-1 = none),
--   mark (unused, 0).
-- refund(s, p, now, cost, mark): moves tat back by cost x interval ticks (not before now).

local gcra = {}

function gcra.load(key, p)
  local v = redis.call('GET', key)
  if not v then
    return { tat = 0, tat_ticks = 0, last_update = 0, last_scheduled_at = 0, den = p.den,
      num = p.num, exists = false }
  end
  local s = gcra.decode(v, p)
  s.last_scheduled_at = 0
  if s.offset > 0 then
    s.last_scheduled_at = s.last_update + s.offset
  end
  return s
end

function gcra.decode(value, p)
  local s = { tat = 0, tat_ticks = 0, last_update = 0, den = p.den, num = p.num,
    exists = true, offset = 0 }
  if string.byte(value, 1) == 45 then
    -- '-<c><x: 16 digits>': x = tat x den + tat_ticks, tat - last_update = c x interval ticks
    local x = tonumber(string.sub(value, -16))
    local c = tonumber(string.sub(value, 2, -17))
    local q = fdiv(x, p.den)
    s.tat, s.tat_ticks = q, x - q * p.den
    s.last_update = q - fdiv(c * p.num - s.tat_ticks, p.den)
    return s
  end
  local v, offset = split_scheduled(value)
  s.offset = offset
  local first = string.find(v, ':', 1, true)
  if not first then
    s.tat, s.tat_ticks = unpack2(v, p.den)
    return s
  end
  local second = string.find(v, ':', first + 1, true)
  if second then
    s.tat = tonumber(string.sub(v, 1, first - 1))
    s.tat_ticks = tonumber(string.sub(v, first + 1, second - 1))
    s.last_update = s.tat - tonumber(string.sub(v, second + 1))
  elseif p.den > PACK_MAX then
    s.tat, s.tat_ticks = split2(v)
  else
    s.tat, s.tat_ticks = unpack2(string.sub(v, 1, first - 1), p.den)
    s.last_update = s.tat - tonumber(string.sub(v, first + 1))
  end
  return s
end

-- Packed with the den the state was loaded with (one key, one quota, in practice).
function gcra.save(key, s, ttl)
  local lag = s.tat - s.last_update
  local packed = pack2(s.tat, s.den, s.tat_ticks)
  if type(packed) == 'number' and s.last_scheduled_at <= s.last_update then
    -- the ticks from last_update to the arrival time (< packed < 2^53), in whole cells?
    local ahead = lag * s.den + s.tat_ticks
    local c = fdiv(ahead, s.num)
    if c >= 1 and c <= 921 and c * s.num == ahead then
      save_value(key, string.format('-%d%016d', c, packed), ttl)
      return
    end
  end
  local v
  if type(packed) == 'number' then
    v = string.format('%d:%d', packed, lag)
  elseif packed then
    -- already decimal text (above 2^53); never tostring a number (%.14g rounds it)
    v = packed .. ':' .. string.format('%d', lag)
  else
    v = string.format('%d:%d:%d', s.tat, s.tat_ticks, lag)
  end
  save_value(key, v .. scheduled_suffix(s.last_scheduled_at, s.last_update), ttl)
end

-- The most a state holds ahead of its last update, in ticks: tau plus the longest reservation
-- wait (the time a full burst refills, rounded up) x den: the bounded debt.
local function span_of(p)
  local tau = p.burst * p.num
  return tau + cdiv(tau, p.den) * p.den
end

-- tat - span rounded up to a whole microsecond (0 when negative), without forming tat x den.
-- Only a state without last_update can be read before it.
local function earliest(s, p)
  local span = span_of(p)
  local span_us = fdiv(span, p.den)
  local e = max(s.tat - span_us, 0)
  if s.tat >= span_us and s.tat_ticks > span - span_us * p.den then
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
  -- backwards time: no time passed since the last admission (then the earliest consistent
  -- time, for a state stored without last_update)
  now = max(max(now, s.last_update), earliest(s, p))
  local ahead = ahead_at(s, den, now)
  local new = ahead + cost * interval -- <= span + tau
  -- cost 0 is a peek, allowed even while reservations hold the key beyond its burst
  local allowed = (cost == 0) or new <= tau
  local ahead_after = ahead
  if allowed and consume then
    local q = fdiv(new, den)
    s.tat = now + q
    s.tat_ticks = new - q * den
    s.last_update = now
    ahead_after = new
  end
  local retry_after = -1
  if not allowed then
    retry_after = cdiv(new - tau, den)
  end
  return allowed, fdiv(max(tau - ahead_after, 0), interval), cdiv(ahead_after, den),
    retry_after, 0
end

-- The longest reservation wait: the time a full burst refills, rounded up.
function gcra.max_wait(p)
  return cdiv(p.burst * p.num, p.den)
end

local function set_ahead(s, den, now, ahead)
  local q = fdiv(ahead, den)
  s.tat = now + q
  s.tat_ticks = ahead - q * den
  s.last_update = now
end

-- Reserves `cost` units for now + wait (docs/spec/reservations.md): the tat an admission at
-- that time leaves. Returns false when they do not fit then, else true, remaining,
-- reset_after and the effective now.
function gcra.reserve_at(s, p, now, cost, wait)
  if wait > gcra.max_wait(p) then
    return false
  end
  local interval, den = p.num, p.den
  local tau = p.burst * interval
  now = max(max(now, s.last_update), earliest(s, p))
  local ahead = ahead_at(s, den, now)
  if cost > 0 then
    local shift = wait * den
    local new = max(ahead, shift) + cost * interval
    if new - shift > tau then
      return false
    end
    set_ahead(s, den, now, new)
    s.last_scheduled_at = latest_scheduled(s.last_scheduled_at, now, wait)
    ahead = new
  end
  return true, fdiv(max(tau - ahead, 0), interval), cdiv(ahead, den), now
end

-- Settles a reservation of `reserved` units that cost `actual`: back by what it still
-- occupies (not before now), or charged (up to the span). Returns remaining and reset_after.
function gcra.settle(s, p, now, at, reserved, actual)
  local interval, den = p.num, p.den
  local tau = p.burst * interval
  local span = span_of(p)
  now = max(max(now, s.last_update), earliest(s, p))
  local ahead = ahead_at(s, den, now)
  if actual <= reserved then
    local latest = max(now, s.last_scheduled_at)
    ahead = max(ahead - settle_give_back(interval, den, gcra.max_wait(p), latest, at, reserved,
      actual), 0)
  else
    ahead = min(ahead + min(actual - reserved, cdiv(span, interval)) * interval, span)
  end
  set_ahead(s, den, now, ahead)
  if s.last_scheduled_at <= now then
    s.last_scheduled_at = 0
  end
  return fdiv(max(tau - ahead, 0), interval), cdiv(ahead, den)
end

function gcra.refund(s, p, now, cost, mark)
  local interval, den = p.num, p.den
  now = max(max(now, s.last_update), earliest(s, p))
  local ahead = max(ahead_at(s, den, now) - cost * interval, 0)
  local q = fdiv(ahead, den)
  s.tat = now + q
  s.tat_ticks = ahead - q * den
  s.last_update = now
  return true
end
