-- take.lua: check and count the counters of one or more rate-limit requests.
--
-- The requests come one after another, each decided on its own: a request
-- is allowed only if every one of its non-shadow counters has room, and then
-- all its counters are counted; a denied request writes nothing, so it
-- consumes no quota, except to its charge counters (CHARGE below), which
-- count their hits whatever the answer: they were already spent. Several
-- requests in one call (coalesced by the store) cost Redis one script
-- invocation instead of one each.
--
-- KEYS: per counter, its current window's key; for a sliding window also the
--       previous window's key right after it. A key may come any number of
--       times.
-- ARGV: the number of triples at the end; then the requests; then the
--       triples, each limit, hits, ttl (ms), which short-form counters name.
--       Per request: n, then per counter five values: limit, hits,
--       ttl (ms), flags (SHADOW, REFUND, SLIDING, CHARGE below, added up),
--       weight.
--       A negative n, -c, heads the short form of the most common request:
--       c fixed-window counters on distinct keys, none a shadow or a
--       charge, each taking hits >= 1. One value per counter follows: the
--       number (from 1) of its triple. Under load most counters of a call
--       share a rule, so Redis reads one argument per counter instead of
--       three, and Lua converts each limit and hits to a number once per
--       call.
-- Returns, per request: status (1 allowed, 0 denied, -1 a counter holds a
-- non-integer: nothing written), then per counter: current (after counting,
-- for an allowed request or a charge), previous, over.
-- A short-form request gets one value per counter instead: when allowed,
-- its count after counting; when denied, its count if it had room and -1
-- minus its count if it had not; when failed, 0.
--
-- Redis runs every replica's scripts on one thread, so the script spends
-- one Redis command per distinct key a call touches, however many requests
-- hit it: a key is read once, the requests are decided in order on its
-- running count in Lua, and it is written once at the end.
--
--   1. plan: add up, per key, the hits that the call's counting counters
--      (all but refunds) could take.
--   2. Each request in order: a key's first touch reads it. With hits
--      planned, the read is INCRBY of all of them, betting that they are
--      admitted, the common case for a key with room: the key is then
--      already written. Else (a check, a refund, a previous window) it is a
--      GET. Every later touch is Lua arithmetic on the running count.
--   3. settle: per key that ended other than Redis holds it, one command:
--      INCRBY of the difference (negative: the hits of denied requests
--      given back), or DEL of a new key that no request took; for a key
--      that a counter took from 0 (new, or refunded to 0), SET with that
--      counter's TTL, or PEXPIRE when the bet was exact.
--
-- So a key with room costs one INCRBY per call (and a PEXPIRE when new);
-- a key some of whose requests are denied costs one more.
--
-- A counter is created with a TTL of its window plus one second and the TTL
-- is never extended: a key gets a TTL only from a counter that takes it
-- from 0.
--
-- TTLs go to redis.call as the ARGV strings they came as; counts are Lua
-- numbers, which Redis formats back into integers (exact below 2^53).

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

local out = {}

-- triples holds the call's triples by the ARGV string that names them
-- ("1", "2", ...): {limit, hits, ttl as the string SET and PEXPIRE take}.
local triples = {}

-- The state of every key the call touches, by key.
local planned = {} -- hits the call's counting counters may take (plan)
local count = {}   -- the count as the requests so far left it; false: not an integer
local held = {}    -- what Redis holds now
local was = {}     -- the count before the call
local ttlOf = {}   -- the ttl (ms, a string) of the counter that took it from 0
local touched = {} -- the keys in the order of their first touch

-- plan fills planned from the requests in ARGV[2..last].
local function plan(last)
  local a, ki = 2, 1
  while a <= last do
    local n = tonumber(ARGV[a])
    a = a + 1
    if n < 0 then
      for i = 0, -n - 1 do
        local k = KEYS[ki + i]
        planned[k] = (planned[k] or 0) + triples[ARGV[a + i]][2]
      end
      a, ki = a - n, ki - n
    else
      for _ = 1, n do
        local hits, flags = tonumber(ARGV[a + HITS]), tonumber(ARGV[a + FLAGS])
        if hits > 0 and not has(flags, REFUND) then
          local k = KEYS[ki]
          planned[k] = (planned[k] or 0) + hits
        end
        ki = ki + 1
        if has(flags, SLIDING) then ki = ki + 1 end
        a = a + COUNTER_ARGS
      end
    end
  end
end

-- load returns key k's running count, reading it on its first touch (see
-- step 2 above): false when it holds something other than an integer.
local function load(k)
  local c = count[k]
  if c ~= nil then return c end
  local add = planned[k]
  if add then
    local v = redis.pcall('INCRBY', k, add)
    if type(v) == 'number' then
      held[k], c = v, v - add
    else
      c = false
    end
  else
    local v = redis.pcall('GET', k)
    if v == false then
      c = 0
    elseif type(v) == 'string' and string.find(v, '^%-?%d+$') then
      c = tonumber(v)
    else
      c = false
    end
    held[k] = c
  end
  count[k], was[k] = c, c
  if c then touched[#touched + 1] = k end
  return c
end

-- short decides a short-form request of n counters whose triple numbers
-- start at ARGV[a] and whose first key is KEYS[ki]. It makes no Lua tables.
local function short(n, a, ki)
  local st = #out + 1
  local status = 1
  out[st] = status -- first, so out stays a sequence as it grows
  for i = 1, n do
    local t = triples[ARGV[a + i - 1]]
    local c = load(KEYS[ki + i - 1])
    if not c then
      status = -1
      break
    end
    local v = c + t[2]
    if v > t[1] then status = 0 end
    out[st + i] = v
  end
  for i = 1, n do
    local t, k = triples[ARGV[a + i - 1]], KEYS[ki + i - 1]
    if status == 1 then
      local c = count[k]
      if c == 0 then ttlOf[k] = t[3] end
      count[k] = c + t[2]
    elseif status == 0 then
      local v = out[st + i]
      local before = v - t[2]
      if v > t[1] then before = -1 - before end
      out[st + i] = before
    else
      out[st + i] = 0
    end
  end
  out[st] = status
  return a + n, ki + n
end

-- full decides a request of n counters whose values start at ARGV[a] and
-- whose first key is KEYS[ki]: it checks every counter, then counts.
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
    local c = load(k)
    local p = 0
    if has(flags, SLIDING) then
      p = load(KEYS[ki])
      ki = ki + 1
    end
    if not c or not p then
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
        local c = count[k]
        if has(flags, REFUND) then
          if c > 0 then
            local v = c - hits
            if v < 0 then v = 0 end
            count[k], cur[i] = v, v
          end
        else
          if c == 0 then ttlOf[k] = ARGV[b + TTL] end
          count[k], cur[i] = c + hits, c + hits
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

-- settle writes every key whose count or TTL the call changed, one command
-- each (see step 3 above): a key that a counter took from 0 gets that
-- counter's TTL, as it would have from INCRBY and PEXPIRE; a new key that
-- no request took is deleted again.
local function settle()
  for i = 1, #touched do
    local k = touched[i]
    local c, h, ttl = count[k], held[k], ttlOf[k]
    if ttl then
      if c == h then
        redis.call('PEXPIRE', k, ttl)
      else
        redis.call('SET', k, c, 'PX', ttl)
      end
    elseif c ~= h then
      if c == 0 and was[k] == 0 then
        redis.call('DEL', k)
      else
        redis.call('INCRBY', k, c - h)
      end
    end
  end
end

local ntriples = tonumber(ARGV[1])
local last = #ARGV - 3 * ntriples -- the requests end here
for b = last + 1, #ARGV, 3 do
  triples[tostring((b - last + 2) / 3)] = {tonumber(ARGV[b]), tonumber(ARGV[b + 1]), ARGV[b + 2]}
end
plan(last)
local a, ki = 2, 1
while a <= last do
  local n = tonumber(ARGV[a]) -- the request's counters; negative: the short form
  if n < 0 then
    a, ki = short(-n, a + 1, ki)
  else
    a, ki = full(n, a + 1, ki)
  end
end
settle()
return out
