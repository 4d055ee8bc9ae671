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
-- The script is assembled at build time (script.go) from this file, its
-- head: the protocol, the state of the call, the short form; then one
-- section per algorithm (lua/fixed.lua, lua/sliding.lua, lua/bucket.lua,
-- lua/log.lua), each naming its own argument slots and registering how it
-- decides and counts in ALGORITHMS; then run.lua, the full form and the
-- loop over the requests. One script, one SHA, one EVALSHA per batch.
--
-- KEYS: first the shared keys (below), each once; then per counter its
--       current window's key and, for a sliding window, the previous
--       window's key right after it.
-- ARGV: the number of triples, the number of shared keys; then the
--       requests; then the triples, each limit, hits, ttl (ms), which
--       short-form counters name; then per shared key its planned hits.
--       Per request: n, then per counter five values. The second is its
--       hits and the fourth its flags (SHADOW, REFUND, SLIDING, CHARGE,
--       TOKEN, LOG, REF below, added up); its algorithm's section names
--       the other three: a fixed window's limit, ttl (ms; s for REF), 0; a
--       sliding window's limit, ttl (ms), weight; a TOKEN counter's (a
--       token bucket, GCRA) tolerance (ns), now (ms), interval (ns); a LOG
--       counter's (a sliding log) limit, now (ms), window size (ms). Only
--       a sliding window has a previous window's key.
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

-- has reports whether flags holds flag, one of the values above.
local function has(flags, flag)
  return flags % (flag * 2) >= flag
end

-- The values of a full-form counter that every algorithm has, as offsets
-- from its first ARGV index; each algorithm's section names the others.
local HITS, FLAGS = 1, 3
local COUNTER_ARGS = 5

-- ALGORITHMS holds each algorithm's section by its flag (0 for a fixed
-- window), which kind picks out of a counter's flags: decide(k, b, ki,
-- hits, pending, refund, state) reads the counter whose values start at
-- ARGV[b] and whose key is k (its next key KEYS[ki]) and decides it after
-- pending hits; it returns the counter's three reply values, the first or
-- second nil when the key holds something else than the counter's state,
-- and the index of the next counter's key. count(k, b, hits, refund,
-- status, over, flags, state) writes what the decided request counts and
-- returns the first and second reply values after, nil for one unchanged.
-- state is one table per request, which a section may keep what it read in.
local ALGORITHMS = {}

-- kind returns the algorithm's flag in flags: SLIDING, TOKEN, LOG, or 0.
local function kind(flags)
  return flags % 64 - flags % 16 + flags % 8 - flags % 4
end

-- counts reports whether a counter of hits, in a request of status, is
-- counted: an allowed request counts, a denied one only its charges.
local function counts(hits, status, flags)
  return hits > 0 and (status == 1 or has(flags, CHARGE))
end

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
