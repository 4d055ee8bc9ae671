-- take.lua: check and count the counters of one or more rate-limit requests.
--
-- The requests come one after another, each decided on its own: a request
-- is allowed only if every one of its non-shadow counters has room, and then
-- all its counters are counted; a denied request writes nothing, so it
-- consumes no quota. Several requests in one call (coalesced by the store)
-- cost Redis one script invocation instead of one each.
--
-- KEYS: per counter, its current window's key; for a sliding window also the
--       previous window's key right after it.
-- ARGV: t, the number of triples at the end; then the requests; then t
--       triples of limit, hits, ttl (ms), which short-form counters name.
--       Per request: n, then per counter five values: limit, hits,
--       ttl (ms), flags, weight.
--       flags: 1 shadow (never denies), 2 refund (hits are given back),
--              4 sliding (estimate = previous * weight + current).
--       A negative n, -c, heads the short form of the most common request:
--       c fixed-window counters on distinct keys, none a shadow, each
--       taking hits >= 1. One value per counter follows: the number (from
--       1) of its triple. Under load most counters of a call share a rule,
--       so Redis reads one argument per counter instead of three, and Lua
--       converts each limit and hits to a number once per call.
-- Returns, per request: status (1 allowed, 0 denied, -1 a counter holds a
-- non-integer: nothing written), then per counter: current, previous, over.
-- A short-form request gets one value per counter instead: when allowed,
-- its count after counting; when denied, its count if it had room and -1
-- minus its count if it had not; when failed, 0.
--
-- The short form is for Redis's CPU, which the script is most of: it counts
-- first and undoes on denial (one call per counter, where the full form
-- first GETs every counter), makes no Lua tables per request and returns
-- one value per counter instead of three. (The README's Benchmarks section
-- lists what it saved when it came in, against the full form as that was
-- then.)
--
-- A counter is created with a TTL of its window plus one second and the TTL
-- is never extended.
--
-- Numbers go to redis.call as the ARGV strings they came as: a Lua number
-- would be formatted back to a string with printf, about a tenth of the
-- script's cost.

-- counter reads a counter: 0 when missing, nil when it is not an integer.
local function counter(k)
  local v = redis.pcall('GET', k)
  if v == false then return 0 end
  if type(v) ~= 'string' then return nil end
  return tonumber(v)
end

local out = {}

-- triples holds the call's triples by the ARGV string that names them
-- ("1", "2", ...): {limit, hits, hits as a string, ttl as a string}.
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
    local v = redis.pcall('INCRBY', k, t[3])
    if type(v) ~= 'number' then
      status, failed = -1, i
      break
    end
    if v == t[2] then redis.call('PEXPIRE', k, t[4]) end
    if v > t[1] then status = 0 end
    out[st + i] = v
  end
  if status ~= 1 then
    for i = failed - 1, 1, -1 do
      local t, k = triples[ARGV[a + i - 1]], KEYS[ki + i - 1]
      if redis.call('DECRBY', k, t[3]) == 0 then redis.call('DEL', k) end
      local v = out[st + i]
      local before = v - t[2]
      if v > t[1] then before = -1 - before end
      out[st + i] = before
    end
    for i = failed, n do out[st + i] = 0 end
  end
  out[st] = status
  return a + n, ki + n
end

-- full decides a request of n counters whose values start at ARGV[a] and
-- whose first key is KEYS[ki]: it reads every counter, decides, and only
-- then writes, so a denial writes nothing.
local function full(n, a, ki)
  local cur, prev, over, keyOf = {}, {}, {}, {}
  local status = 1
  local pending = {}
  for i = 1, n do
    local b = a + (i - 1) * 5
    local limit = tonumber(ARGV[b])
    local hits = tonumber(ARGV[b + 1])
    local flags = tonumber(ARGV[b + 3])
    local k = KEYS[ki]
    ki = ki + 1
    keyOf[i] = k
    local c = counter(k)
    local p = 0
    if flags % 8 >= 4 then
      p = counter(KEYS[ki])
      ki = ki + 1
    end
    if c == nil or p == nil then
      status, c, p = -1, 0, 0
    end
    cur[i], prev[i], over[i] = c, p, 0
    if flags % 4 < 2 then
      local need = hits
      if need < 1 then need = 1 end
      local est = c + (pending[k] or 0)
      if flags % 8 >= 4 then est = p * tonumber(ARGV[b + 4]) + est end
      if est + need > limit then
        over[i] = 1
        if flags % 2 == 0 and status == 1 then status = 0 end
      end
      pending[k] = (pending[k] or 0) + hits
    end
  end
  if status == 1 then
    for i = 1, n do
      local b = a + (i - 1) * 5
      local hits = tonumber(ARGV[b + 1])
      local k = keyOf[i]
      if hits > 0 then
        if tonumber(ARGV[b + 3]) % 4 >= 2 then
          local c = counter(k)
          if c > 0 then
            local v = c - hits
            if v < 0 then v = 0 end
            redis.call('SET', k, v, 'KEEPTTL')
            cur[i] = v
          end
        else
          local v = redis.call('INCRBY', k, ARGV[b + 1])
          if v == hits then redis.call('PEXPIRE', k, ARGV[b + 2]) end
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
  return a + 5 * n, ki
end

local last = #ARGV - 3 * tonumber(ARGV[1]) -- the requests end here
for b = last + 1, #ARGV, 3 do
  triples[tostring((b - last + 2) / 3)] =
    {tonumber(ARGV[b]), tonumber(ARGV[b + 1]), ARGV[b + 1], ARGV[b + 2]}
end
local a, ki = 2, 1
while a <= last do
  local n = tonumber(ARGV[a])
  if n < 0 then
    a, ki = short(-n, a + 1, ki)
  else
    a, ki = full(n, a + 1, ki)
  end
end
return out
