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
-- KEYS: first the shared keys (below), each once; then per counter its
--       current window's key and, for a sliding window, the previous
--       window's key right after it.
-- ARGV: the number of triples, the number of shared keys; then the
--       requests; then the triples, each limit, hits, ttl (ms), which
--       short-form counters name; then per shared key its planned hits.
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
-- Redis runs every replica's scripts on one thread. A key that one counter
-- of the call uses is counted first and undone on denial: one INCRBY, and a
-- DECRBY on denial (the full form GETs first). A key that several counters
-- use, a shared key (a hot tenant's), costs one command per call however
-- many requests hit it, and at most one more:
--
--   1. Before the requests, one INCRBY of its planned hits, those its
--      counting counters (all but refunds) could take, betting that they
--      are admitted, the common case for a key with room; a GET when none
--      counts (checks, refunds, a previous window).
--   2. Each request in order is decided on the key's running count in Lua.
--   3. After the requests, if the count came out other than Redis holds
--      it: INCRBY of the difference (negative: the hits of denied requests
--      given back), or DEL of a new key that no request took; for a key
--      a counter took from 0 (new, or refunded to 0), SET with that
--      counter's TTL, or PEXPIRE when the bet was exact.
--
-- The caller (call.go) lists the shared keys; a key used twice that it
-- does not list is decided exactly too, one command per use.
--
-- A counter is created with a TTL of its window plus one second and the TTL
-- is never extended: a key gets a TTL only from a counter that takes it
-- from 0.
--
-- Strings from ARGV go to redis.call as they came where they can, and are
-- converted to numbers once per call: Lua formats a number with printf and
-- parses a string with strtod, each costing more than a table lookup.

-- Globals as locals: a global is a table lookup each time.
local KEYS, ARGV, redis, tonumber, type = KEYS, ARGV, redis, tonumber, type

-- Flags of a full-form counter; call.go has the same values.
local SHADOW = 1  -- checked and counted, but never denies
local REFUND = 2  -- hits are given back instead of taken
local SLIDING = 4 -- estimate = previous * weight + current
local CHARGE = 8  -- hits are counted even when the request is denied; never with REFUND

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
  if type(v) ~= 'string' or not string.find(v, '^%-?%d+$') then return nil end
  return tonumber(v)
end

local out, nout = {}, 0

-- triples holds the call's triples by the ARGV string that names them
-- ("1", "2", ...): {limit, hits, hits as the string INCRBY takes, ttl as
-- the string PEXPIRE takes}.
local triples = {}

-- numbers holds the request heads and planned hits seen, as numbers by
-- their ARGV strings: most requests of a call have the same head, and most
-- shared keys the same few planned hits.
local numbers = {}

-- The shared keys' state: count by key (nil for any other key), the
-- others by the key's index in KEYS.
local count = {} -- the count as the requests so far left it; false: not an integer
local held = {}  -- what Redis holds now
local fresh = {} -- true when the count was 0 before the call
local ttlOf = {} -- by key: the ttl (ms, a string) of the counter that last took it from 0

-- short decides a short-form request of n counters whose triple numbers
-- start at ARGV[a] and whose first key is KEYS[ki]. A counter on a key of
-- its own is counted first and undone on denial, one call per counter
-- instead of a GET and an INCRBY: no other client sees what happens in
-- between. A counter that a denial takes back to 0 is deleted: it was new
-- (or already 0, which a missing key means too). A counter on a shared key
-- is counted and undone alike, in Lua. It makes no Lua tables.
local function short(n, a, ki)
  local st = nout + 1
  local status, failed = 1, n + 1 -- failed: the counter that is no integer
  out[st] = status -- first, so out stays a sequence as it grows
  for i = 1, n do
    local t, k = triples[ARGV[a + i - 1]], KEYS[ki + i - 1]
    local v = count[k]
    if v == nil then
      v = redis.pcall('INCRBY', k, t[3])
      if type(v) ~= 'number' then
        status, failed = -1, i
        break
      end
      if v == t[2] then redis.call('PEXPIRE', k, t[4]) end
    elseif v then
      if v == 0 then ttlOf[k] = t[4] end
      v = v + t[2]
      count[k] = v
    else
      status, failed = -1, i
      break
    end
    if v > t[1] then status = 0 end
    out[st + i] = v
  end
  if status ~= 1 then
    for i = failed - 1, 1, -1 do
      local t, k = triples[ARGV[a + i - 1]], KEYS[ki + i - 1]
      local limit, hits = t[1], t[2]
      local c = count[k]
      if c == nil then
        if redis.call('DECRBY', k, t[3]) == 0 then redis.call('DEL', k) end
      else
        c = c - hits
        count[k] = c
        if c == 0 then ttlOf[k] = nil end -- this counter took it from 0
      end
      local v = out[st + i]
      local before = v - hits
      if v > limit then before = -1 - before end
      out[st + i] = before
    end
    for i = failed, n do out[st + i] = 0 end
  end
  out[st] = status
  nout = st + n
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
    local c = count[k]
    if c == nil then c = counter(k) end
    local p = 0
    if has(flags, SLIDING) then
      p = count[KEYS[ki]]
      if p == nil then p = counter(KEYS[ki]) end
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
      if hits > 0 and (status == 1 or has(flags, CHARGE)) then
        local c = count[k]
        if c then -- a shared key: counted here, written after the requests
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
        elseif has(flags, REFUND) then
          c = counter(k)
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
  nout = nout + 1
  out[nout] = status
  for i = 1, n do
    out[nout + 1], out[nout + 2], out[nout + 3] = cur[i], prev[i], over[i]
    nout = nout + 3
  end
  return a + COUNTER_ARGS * n, ki
end

local ntriples, nshared = tonumber(ARGV[1]), tonumber(ARGV[2])
local last = #ARGV - 3 * ntriples - nshared -- the requests end here
for b = last + 1, last + 3 * ntriples, 3 do
  local limit, hits, ttl = ARGV[b], ARGV[b + 1], ARGV[b + 2]
  triples[tostring((b - last + 2) / 3)] = {tonumber(limit), tonumber(hits), hits, ttl}
end

-- Step 1: read the shared keys.
for i = 1, nshared do
  local k, planned = KEYS[i], ARGV[last + 3 * ntriples + i]
  local c
  if planned ~= '0' then
    local v = redis.pcall('INCRBY', k, planned)
    if type(v) == 'number' then
      local p = numbers[planned]
      if p == nil then
        p = tonumber(planned)
        numbers[planned] = p
      end
      held[i], c = v, v - p
    else
      c = false
    end
  else
    c = counter(k) or false
    held[i] = c
  end
  count[k], fresh[i] = c, c == 0
end

-- Step 2: the requests.
local a, ki = 3, nshared + 1
while a <= last do
  local h = ARGV[a]
  local n = numbers[h] -- the request's counters; negative: the short form
  if n == nil then
    n = tonumber(h)
    numbers[h] = n
  end
  if n < 0 then
    a, ki = short(-n, a + 1, ki)
  else
    a, ki = full(n, a + 1, ki)
  end
end

-- Step 3: write the shared keys back.
for i = 1, nshared do
  local k = KEYS[i]
  local c, h, ttl = count[k], held[i], ttlOf[k]
  if not c then
    -- not an integer: nothing was written
  elseif ttl then
    if c == h then
      redis.call('PEXPIRE', k, ttl)
    else
      redis.call('SET', k, c, 'PX', ttl)
    end
  elseif c ~= h then
    if c == 0 and fresh[i] then
      redis.call('DEL', k)
    else
      redis.call('INCRBY', k, c - h)
    end
  end
end
return out
