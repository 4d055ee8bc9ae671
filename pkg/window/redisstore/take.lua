-- take.lua: check and count the counters of one or more rate-limit requests.
--
-- The requests come one after another, each decided on its own: a request
-- is allowed only if every one of its non-shadow counters has room, and then
-- all its counters are counted; a denied request writes nothing, so it
-- consumes no quota, except to its charge counters (CHARGE below), which
-- count their hits whatever the answer: they were already spent. Several requests in one call (coalesced by the store)
-- cost Redis one script invocation instead of one each.
--
-- KEYS: per counter, its current window's key; for a sliding window also the
--       previous window's key right after it.
-- ARGV: the number of triples at the end; then the requests; then the
--       triples, each limit, hits, ttl (ms), which short-form counters name.
--       Per request: n, then per counter five values: limit, hits,
--       ttl (ms), flags (SHADOW, REFUND, SLIDING, CHARGE below, added up),
--       weight.
--       A negative n, -c, heads the short form of the most common request:
--       c fixed-window counters on distinct keys, none a shadow or a
--       charge, each taking hits >= 1. One value per counter follows: the number (from
--       1) of its triple. Under load most counters of a call share a rule,
--       so Redis reads one argument per counter instead of three, and Lua
--       converts each limit and hits to a number once per call.
-- Returns, per request: status (1 allowed, 0 denied, -1 a counter holds a
-- non-integer: nothing written), then per counter: current (after counting,
-- for an allowed request or a charge), previous, over.
-- A short-form request gets one value per counter instead: when allowed,
-- its count after counting; when denied, its count if it had room and -1
-- minus its count if it had not; when failed, 0.
--
-- The short form is for Redis's CPU, which runs every replica's scripts on
-- one thread: it counts first and undoes on denial (one call per counter,
-- where the full form first GETs every counter), makes no Lua tables per
-- request and returns one value per counter instead of three.
--
-- A counter is created with a TTL of its window plus one second and the TTL
-- is never extended.
--
-- Numbers go to redis.call as the ARGV strings they came as: a Lua number
-- would be formatted back to a string with printf on every call.

-- Flags of a full-form counter; call.go has the same values.
local SHADOW = 1  -- checked and counted, but never denies
local REFUND = 2  -- hits are given back instead of taken
local SLIDING = 4 -- estimate = previous * weight + current
local CHARGE = 8  -- hits are counted even when the request is denied

-- has reports whether flags holds flag, one of the values above.
local function has(flags, flag)
  return flags % (flag * 2) >= flag
end

-- The values of a full-form counter, as offsets from its first ARGV index.
local LIMIT, HITS, TTL, FLAGS, WEIGHT = 0, 1, 2, 3, 4
local COUNTER_ARGS = 5

-- counter reads a counter: 0 when missing, nil when it is not an integer.
local function counter(k)
  local v = redis.pcall('GET', k)
  if v == false then return 0 end
  if type(v) ~= 'string' then return nil end
  return tonumber(v)
end

local out = {}

-- triples holds the call's triples by the ARGV string that names them
-- ("1", "2", ...): {limit, hits, hits as the string INCRBY takes, ttl as
-- the string PEXPIRE takes}.
local triples = {}

-- short decides a short-form request of n counters whose triple numbers
-- start at ARGV[a] and whose first key is KEYS[ki]. It counts first and
-- undoes on denial, one call per counter instead of a GET and an INCRBY: no
-- other client sees what happens in between. A counter that a denial takes
-- back to 0 is deleted: it was new (or already 0, which a missing key means
-- too).
local function short(n, a, ki)
  local st = #out + 1
  local status, failed = 1, n + 1 -- failed: the counter that is no integer
  out[st] = status -- first, so out stays a sequence as it grows
  for i = 1, n do
    local t, k = triples[ARGV[a + i - 1]], KEYS[ki + i - 1]
    local limit, hits, by, ttl = t[1], t[2], t[3], t[4]
    local v = redis.pcall('INCRBY', k, by)
    if type(v) ~= 'number' then
      status, failed = -1, i
      break
    end
    if v == hits then redis.call('PEXPIRE', k, ttl) end
    if v > limit then status = 0 end
    out[st + i] = v
  end
  if status ~= 1 then
    for i = failed - 1, 1, -1 do
      local t, k = triples[ARGV[a + i - 1]], KEYS[ki + i - 1]
      local limit, hits, by = t[1], t[2], t[3]
      if redis.call('DECRBY', k, by) == 0 then redis.call('DEL', k) end
      local v = out[st + i]
      local before = v - hits
      if v > limit then before = -1 - before end
      out[st + i] = before
    end
    for i = failed, n do out[st + i] = 0 end
  end
  out[st] = status
  return a + n, ki + n
end

-- full decides a request of n counters whose values start at ARGV[a] and
-- whose first key is KEYS[ki]: it reads every counter, decides, and only
-- then writes, so a denial writes nothing but its charges.
local function full(n, a, ki)
  local cur, prev, over, keyOf = {}, {}, {}, {}
  local status = 1
  local pending = {}
  for i = 1, n do
    local b = a + (i - 1) * COUNTER_ARGS
    local limit = tonumber(ARGV[b + LIMIT])
    local hits = tonumber(ARGV[b + HITS])
    local flags = tonumber(ARGV[b + FLAGS])
    local k = KEYS[ki]
    ki = ki + 1
    keyOf[i] = k
    local c = counter(k)
    local p = 0
    if has(flags, SLIDING) then
      p = counter(KEYS[ki])
      ki = ki + 1
    end
    if c == nil or p == nil then
      status, c, p = -1, 0, 0
    end
    cur[i], prev[i], over[i] = c, p, 0
    if not has(flags, REFUND) then
      local need = hits
      if need < 1 then need = 1 end
      local est = c + (pending[k] or 0)
      if has(flags, SLIDING) then est = p * tonumber(ARGV[b + WEIGHT]) + est end
      if est + need > limit then
        over[i] = 1
        if not has(flags, SHADOW) and status == 1 then status = 0 end
      end
      pending[k] = (pending[k] or 0) + hits
    end
  end
  if status ~= -1 then
    for i = 1, n do
      local b = a + (i - 1) * COUNTER_ARGS
      local hits = tonumber(ARGV[b + HITS])
      local flags = tonumber(ARGV[b + FLAGS])
      local k = keyOf[i]
      if hits > 0 and (status == 1 or has(flags, CHARGE) and not has(flags, REFUND)) then
        if has(flags, REFUND) then
          local c = counter(k)
          if c > 0 then
            local v = c - hits
            if v < 0 then v = 0 end
            redis.call('SET', k, v, 'KEEPTTL')
            cur[i] = v
          end
        else
          local v = redis.call('INCRBY', k, ARGV[b + HITS])
          if v == hits then redis.call('PEXPIRE', k, ARGV[b + TTL]) end
          cur[i] = v
        end
      end
    end
  end
  out[#out + 1] = status
  for i = 1, n do
    out[#out + 1] = cur[i]
    out[#out + 1] = prev[i]
    out[#out + 1] = over[i]
  end
  return a + COUNTER_ARGS * n, ki
end

local ntriples = tonumber(ARGV[1])
local last = #ARGV - 3 * ntriples -- the requests end here
for b = last + 1, #ARGV, 3 do
  local limit, hits, ttl = ARGV[b], ARGV[b + 1], ARGV[b + 2]
  triples[tostring((b - last + 2) / 3)] = {tonumber(limit), tonumber(hits), hits, ttl}
end
local a, ki = 2, 1
while a <= last do
  local n = tonumber(ARGV[a]) -- the request's counters; negative: the short form
  if n < 0 then
    a, ki = short(-n, a + 1, ki)
  else
    a, ki = full(n, a + 1, ki)
  end
end
return out
