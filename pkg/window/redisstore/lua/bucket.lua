-- The token bucket's section of take.lua (see its head): one TAT per
-- counter. Its values: tolerance (ns), hits, now (ms), flags, interval
-- (ns).

-- SPAN is window.MaxBucketSpan: the most a bucket's cost or its TAT's lead
-- over now may be, in ns.
local SPAN = 9007199254740992

-- bucketEmpty returns how far (ns) the TAT at key k runs ahead of nowMs,
-- 0 when the bucket is full or missing; nil when k holds no TAT.
local function bucketEmpty(k, nowMs)
  local v = redis.pcall('GET', k)
  if v == false then return 0 end
  if type(v) ~= 'string' then return nil end
  local ms, ns = string.match(v, '^(%d+)%.(%d%d%d%d%d%d)$')
  if not ms then return nil end
  local e = (tonumber(ms) - nowMs) * 1000000 + tonumber(ns)
  if e < 0 then return 0 end
  return e
end

-- bucketCost is hits x interval ns, at most SPAN. The product is exact
-- when it is at most 2^53 and rounds to at least 2^53 when it is more.
local function bucketCost(hits, interval)
  local c = hits * interval
  if c > SPAN then return SPAN end
  return c
end

-- bucketWrite stores at k a bucket empty ns ahead of nowMs: the TAT, with
-- a TTL until the bucket is full, rounded up to the ms, plus one second.
-- fmod is exact, so the ms and ns parts are too.
local function bucketWrite(k, nowMs, empty)
  local ns = math.fmod(empty, 1000000)
  local ms = (empty - ns) / 1000000
  local ttl = ms + 1000
  if ns > 0 then ttl = ttl + 1 end
  redis.call('SET', k, string.format('%d.%06d', nowMs + ms, ns), 'PX', ttl)
end

-- bucketHolds returns the most hits one request may take from a full
-- bucket of tolerance tol and interval iv: the whole intervals in tol, at
-- least one (window.Request.bucketHolds). fmod is exact, so the quotient
-- is too.
local function bucketHolds(tol, iv)
  local most = (tol - math.fmod(tol, iv)) / iv
  if most < 1 then return 1 end
  return most
end

-- bucketDecide reads the bucket at k, decides a counter of it that takes
-- hits (1 when 0) after pending hits (0 interval: a limit of 0, never
-- admits) and returns empty, retry and over (0 or 1); empty is nil when k
-- holds no TAT. A request of more hits than the bucket holds, or of 2^53
-- or more (which Go tells apart and Lua's numbers do not), never fits:
-- its retry is empty.
local function bucketDecide(k, b, hits, pending, refund)
  local tolerance, nowMs, interval = tonumber(ARGV[b]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 4])
  local e = bucketEmpty(k, nowMs)
  if not e or refund then return e, 0, 0 end
  local need = hits
  if need < 1 then need = 1 end
  if interval == 0 then return e, e, 1 end
  local want = pending + need
  if want >= SPAN or want > bucketHolds(tolerance, interval) then return e, e, 1 end
  -- room: how far the bucket may run ahead of now before the hits, at
  -- least 0. Comparing e with it keeps every value within 2^53, where
  -- e + cost (up to 2^54 after a charge) would round.
  local room = tolerance - bucketCost(want, interval)
  if e <= room then return e, 0, 0 end
  return e, e - room, 1
end

-- bucketCount takes (or, refunding, gives back) the hits of the counter at
-- ARGV[b] from the bucket at k, empty ns ahead of now, and returns its
-- new empty.
local function bucketCount(k, b, hits, empty, refund)
  local nowMs, interval = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 4])
  local c = bucketCost(hits, interval)
  if refund then
    empty = empty - c
    if empty < 0 then empty = 0 end
  else
    empty = empty + c
    if empty > SPAN then empty = SPAN end
  end
  bucketWrite(k, nowMs, empty)
  return empty
end

-- The request's state holds by key the bucket's empty (ns), as read and as
-- written, for the next counter of the request on it.
ALGORITHMS[TOKEN] = {
  decide = function(k, b, ki, hits, pending, refund, state)
    local e, retry, o = bucketDecide(k, b, hits, pending, refund)
    state[k] = e
    return e, retry, o, ki
  end,
  count = function(k, b, hits, refund, status, _, flags, state)
    if counts(hits, status, flags) then
      local e = bucketCount(k, b, hits, state[k], refund)
      state[k] = e
      return e
    end
  end,
}
