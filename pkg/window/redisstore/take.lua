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
--       ttl (ms), flags (SHADOW, REFUND, SLIDING, CHARGE, TOKEN, LOG below,
--       added up), weight. A TOKEN counter (a token bucket, GCRA) sends
--       instead: tolerance (ns), hits, now (ms), flags, interval (ns); a
--       LOG counter (a sliding log): limit, hits, now (ms), flags, window
--       size (ms). Neither has a previous window's key.
--       A negative n, -c, heads the short form of the most common request:
--       c fixed-window counters on distinct keys, none a shadow or a
--       charge, each taking hits >= 1. One value per counter follows: the
--       number (from 1) of its triple. Under load most counters of a call
--       share a rule, so Redis reads one argument per counter instead of
--       three, and Lua converts each limit and hits to a number once per
--       call.
-- Returns, per request: status (1 allowed, 0 denied, -1 a counter holds a
-- non-integer, or a TOKEN or LOG key something else than its state: nothing
-- written), then per counter: current (after counting, for an allowed
-- request or a charge), previous, over (0 or 1). A TOKEN counter answers
-- instead: empty (ns the bucket's TAT runs ahead of now, after counting),
-- retry (ns until the hits would fit, when over, else 0), over (0 or 1);
-- Go turns empty into the count of tokens taken, which needs the interval.
-- A LOG counter answers: count (entries in the window ending now, after
-- counting), empty (ms until the newest entry leaves the window; 0 when
-- none), and 0 when not over, else 1 + retry (ms until the hits would fit).
-- Every value is an integer below 2^53, which Lua's numbers hold exactly.
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
-- A TOKEN counter's state is one string, the theoretical arrival time
-- (TAT) in ms with six digits of ns, "<ms>.<ns>", which GET shows an
-- operator; the script computes in ns relative to now, below 2^53 (the
-- tolerance is at most 2^53 ns, window.MaxBucketSpan), so every value is
-- exact. Each write sets the TTL to the time until the bucket is full
-- again, rounded up to the ms, plus one second (bucketTTL in pkg/window). A LOG
-- counter is a sorted set of one member per counted hit, scored by its
-- time (ms): ZCARD is the count, with no sum to keep. A member is
-- "<ms>:<i>", i the number of the set's earlier members of that score
-- (ZCOUNT), written as its digit count and its digits ("10", "212") so
-- that members of one score sort in the order they came: a refund removes
-- the highest ranks, so the numbers of a score stay 0..n-1 and the next
-- one is new. Every call first removes the members that left the window
-- (ZREMRANGEBYSCORE); each write sets the TTL to the window plus one
-- second. Neither is ever a shared key or in the short form: they are
-- decided one command per use, exactly.
--
-- A REF counter (a fixed window in envoyproxy/ratelimit's key layout,
-- window.Request.Reference; its ttl is in seconds) counts as that server
-- does with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, so that both can
-- share it during a migration: every decision that writes (any but a failed one) sends INCRBY and
-- EXPIRE, the INCRBY of its hits when the request is allowed, when the
-- counter itself has no room for them, or for a charge, else of 0. It is
-- never a shared key or in the short form.
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
local TOKEN = 16  -- a token bucket (GCRA); see the header for its values
local LOG = 32    -- a sliding log; see the header for its values
local REF = 64    -- envoyproxy/ratelimit's counting; see the header

-- SPAN is window.MaxBucketSpan: the most a bucket's cost or its TAT's lead
-- over now may be, in ns.
local SPAN = 9007199254740992

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

-- logs holds, by key, what this request's decision read of a LOG
-- counter's sorted set, kept current by the request's writes: n, members in
-- the window ending now; newest, the newest member's score (nil when
-- none); atNow, the members scored now (nil until counted).
local logs = {}

-- logRead removes from the log at k the members that left the window of
-- size ms ending at nowMs and returns, and keeps in logs, what is left;
-- nil when k holds no sorted set.
local function logRead(k, nowMs, size)
  if type(redis.pcall('ZREMRANGEBYSCORE', k, '-inf', nowMs - size)) ~= 'number' then return nil end
  local s = {n = redis.call('ZCARD', k)}
  if s.n > 0 then s.newest = tonumber(redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')[2]) end
  logs[k] = s
  return s
end

-- logEmpty returns the ms from nowMs until the newest member of s leaves
-- the window of size ms; 0 when there is none.
local function logEmpty(s, nowMs, size)
  if s.n == 0 then return 0 end
  return s.newest + size - nowMs
end

-- logRetry returns 1 + the ms from nowMs until hits (1 when 0) after
-- pending fit the log s at k of limit in the window of size ms, when they
-- do not fit now (or 1 + its empty, when they never fit), else 0.
local function logRetry(k, s, hits, pending, limit, nowMs, size)
  local want = hits
  if want < 1 then want = 1 end
  want = want + pending
  if want > limit then return 1 + logEmpty(s, nowMs, size) end
  if s.n <= limit - want then return 0 end
  local r = s.n - (limit - want) - 1 -- the member whose leaving makes room
  return 1 + tonumber(redis.call('ZRANGE', k, r, r, 'WITHSCORES')[2]) + size - nowMs
end

-- logAdd adds n members at nowMs (its ARGV string now) to the log s at k.
-- ZADD takes them in chunks: Lua's unpack has a bounded stack.
local function logAdd(k, s, nowMs, now, n)
  local i = s.atNow
  if i == nil then
    i = 0
    if s.n > 0 and s.newest >= nowMs then i = redis.call('ZCOUNT', k, nowMs, nowMs) end
  end
  s.atNow, s.n = i + n, s.n + n
  if s.newest == nil or s.newest < nowMs then s.newest = nowMs end
  local prefix = now .. ':'
  while n > 0 do
    local args, m = {}, 0
    while n > 0 and m < 1000 do
      local d = tostring(i)
      args[2 * m + 1], args[2 * m + 2] = now, prefix .. #d .. d
      i, n, m = i + 1, n - 1, m + 1
    end
    redis.call('ZADD', k, unpack(args))
  end
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

-- decideBucket reads the bucket at k, decides a counter of it that takes
-- hits (1 when 0) after pending hits (0 interval: a limit of 0, never
-- admits) and returns empty, retry and over (0 or 1); empty is nil when k
-- holds no TAT. A request of more hits than the bucket holds, or of 2^53
-- or more (which Go tells apart and Lua's numbers do not), never fits:
-- its retry is empty.
local function decideBucket(k, b, hits, pending, refund)
  local nowMs, tol, iv = tonumber(ARGV[b + TTL]), tonumber(ARGV[b + LIMIT]), tonumber(ARGV[b + WEIGHT])
  local e = bucketEmpty(k, nowMs)
  if not e or refund then return e, 0, 0 end
  local need = hits
  if need < 1 then need = 1 end
  if iv == 0 then return e, e, 1 end
  local want = pending + need
  if want >= SPAN or want > bucketHolds(tol, iv) then return e, e, 1 end
  -- room: how far the bucket may run ahead of now before the hits, at
  -- least 0. Comparing e with it keeps every value within 2^53, where
  -- e + cost (up to 2^54 after a charge) would round.
  local room = tol - bucketCost(want, iv)
  if e <= room then return e, 0, 0 end
  return e, e - room, 1
end

-- decideLog reads the log at k and decides a counter of it that takes hits
-- after pending hits; it returns count, empty (ms) and 0 or 1 + retry (ms);
-- count is nil when k holds no sorted set.
local function decideLog(k, b, hits, pending, refund)
  local nowMs, limit, size = tonumber(ARGV[b + TTL]), tonumber(ARGV[b + LIMIT]), tonumber(ARGV[b + WEIGHT])
  local s = logRead(k, nowMs, size)
  if not s then return nil, 0, 0 end
  local empty = logEmpty(s, nowMs, size)
  if refund then return s.n, empty, 0 end
  return s.n, empty, logRetry(k, s, hits, pending, limit, nowMs, size)
end

-- countBucket takes (or, refunding, gives back) the hits of the counter at
-- ARGV[b] from the bucket at k, empty ns ahead of now, and returns its
-- new empty.
local function countBucket(k, b, hits, empty, refund)
  local nowMs, iv = tonumber(ARGV[b + TTL]), tonumber(ARGV[b + WEIGHT])
  local c = bucketCost(hits, iv)
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

-- countLog adds the hits of the counter at ARGV[b] to the log at k, at
-- most limit + 1 members (window.Request.LogEntries), or removes the
-- newest as many for a refund; it returns the new count and empty (ms).
-- The log is as this request's decision read it (logs[k]).
local function countLog(k, b, hits, refund)
  local now = ARGV[b + TTL]
  local nowMs, limit, size = tonumber(now), tonumber(ARGV[b + LIMIT]), tonumber(ARGV[b + WEIGHT])
  local s = logs[k]
  local m = hits
  if m > limit then m = limit + 1 end
  if refund then
    if m > s.n then m = s.n end
    if m > 0 then
      redis.call('ZREMRANGEBYRANK', k, -m, -1)
      s = logRead(k, nowMs, size)
    end
  else
    logAdd(k, s, nowMs, now, m)
  end
  redis.call('PEXPIRE', k, size + 1000)
  return s.n, logEmpty(s, nowMs, size)
end

-- countWindow counts (or, refunding, gives back) the hits of the fixed or
-- sliding window counter at ARGV[b] on key k: a shared key in Lua, written
-- after the requests, any other in Redis. It returns the count after: 0
-- when a refund found nothing to give back, although the counter read 1 or
-- more before the request (an earlier refund of it emptied it).
local function countWindow(k, b, hits, refund)
  local c = count[k]
  if c then -- a shared key: counted here, written after the requests
    if refund then
      if c > 0 then
        local v = c - hits
        if v < 0 then v = 0 end
        count[k] = v
        return v
      end
      return 0
    end
    if c == 0 then ttlOf[k] = ARGV[b + TTL] end
    count[k] = c + hits
    return c + hits
  elseif refund then
    c = counter(k)
    if c > 0 then
      local v = c - hits
      if v < 0 then v = 0 end
      redis.call('SET', k, v, 'KEEPTTL')
      return v
    end
    return 0
  end
  local v = redis.call('INCRBY', k, ARGV[b + HITS])
  if v == hits then redis.call('PEXPIRE', k, ARGV[b + TTL]) end
  return v
end

-- full decides a request of n counters whose values start at ARGV[a] and
-- whose first key is KEYS[ki]: it reads every counter, decides, and only
-- then writes, so a denial writes nothing but its charges.
local function full(n, a, ki)
  local cur, prev, over, keyOf = {}, {}, {}, {}
  local status = 1
  local pending = {}
  local empty = {} -- by key: a bucket's empty (ns), as read and as written
  for i = 1, n do
    local b = a + (i - 1) * COUNTER_ARGS
    local hits = tonumber(ARGV[b + HITS])
    local flags = tonumber(ARGV[b + FLAGS])
    local refund = has(flags, REFUND)
    local k = KEYS[ki]
    ki = ki + 1
    keyOf[i] = k
    local c, p, o = nil, 0, 0
    if has(flags, TOKEN) then
      c, p, o = decideBucket(k, b, hits, pending[k] or 0, refund)
      empty[k] = c
    elseif has(flags, LOG) then
      c, p, o = decideLog(k, b, hits, pending[k] or 0, refund)
    else
      c = count[k]
      if c == nil then c = counter(k) end
      if has(flags, SLIDING) then
        p = count[KEYS[ki]]
        if p == nil then p = counter(KEYS[ki]) end
        ki = ki + 1
      end
      if c and p and not refund then
        local need = hits
        if need < 1 and has(flags, SLIDING) then need = 1 end -- a fixed window checks past the limit
        local est = c + (pending[k] or 0)
        if has(flags, SLIDING) then est = p * tonumber(ARGV[b + WEIGHT]) + est end
        if est + need > tonumber(ARGV[b + LIMIT]) then o = 1 end
      end
    end
    if not c or not p then
      status, c, p, o = -1, 0, 0, 0
    end
    cur[i], prev[i], over[i] = c, p, o
    if o ~= 0 and not has(flags, SHADOW) and status == 1 then status = 0 end
    if not refund then pending[k] = (pending[k] or 0) + hits end
  end
  if status ~= -1 then
    for i = 1, n do
      local b = a + (i - 1) * COUNTER_ARGS
      local hits = tonumber(ARGV[b + HITS])
      local flags = tonumber(ARGV[b + FLAGS])
      local refund = has(flags, REFUND)
      local k = keyOf[i]
      if has(flags, REF) and not refund then
        local add = ARGV[b + HITS]
        if status ~= 1 and over[i] == 0 and not has(flags, CHARGE) then add = 0 end
        cur[i] = redis.call('INCRBY', k, add)
        redis.call('EXPIRE', k, ARGV[b + TTL])
      elseif hits > 0 and (status == 1 or has(flags, CHARGE)) then
        if has(flags, TOKEN) then
          local e = countBucket(k, b, hits, empty[k], refund)
          empty[k], cur[i] = e, e
        elseif has(flags, LOG) then
          cur[i], prev[i] = countLog(k, b, hits, refund)
        else
          cur[i] = countWindow(k, b, hits, refund)
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
