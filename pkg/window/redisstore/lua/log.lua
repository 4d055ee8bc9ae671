-- The sliding log's section of take.lua (see its head): a sorted set of
-- one member per counted hit. Its values: limit, hits, now (ms), flags,
-- window size (ms).

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

-- logDecide reads the log at k and decides a counter of it that takes hits
-- after pending hits; it returns count, empty (ms) and 0 or 1 + retry (ms);
-- count is nil when k holds no sorted set.
local function logDecide(k, b, hits, pending, refund)
  local limit, nowMs, size = tonumber(ARGV[b]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 4])
  local s = logRead(k, nowMs, size)
  if not s then return nil, 0, 0 end
  local empty = logEmpty(s, nowMs, size)
  if refund then return s.n, empty, 0 end
  return s.n, empty, logRetry(k, s, hits, pending, limit, nowMs, size)
end

-- logCount adds the hits of the counter at ARGV[b] to the log at k, at
-- most limit + 1 members (window.Request.LogEntries), or removes the
-- newest as many for a refund; it returns the new count and empty (ms).
-- The log is as this request's decision read it (logs[k]).
local function logCount(k, b, hits, refund)
  local now = ARGV[b + 2]
  local limit, nowMs, size = tonumber(ARGV[b]), tonumber(now), tonumber(ARGV[b + 4])
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

ALGORITHMS[LOG] = {
  decide = function(k, b, ki, hits, pending, refund)
    local c, empty, o = logDecide(k, b, hits, pending, refund)
    return c, empty, o, ki
  end,
  count = function(k, b, hits, refund, status, _, flags)
    if counts(hits, status, flags) then return logCount(k, b, hits, refund) end
  end,
}
