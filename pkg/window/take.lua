-- take.lua: check and count every counter of one rate-limit request, atomically.
--
-- KEYS: per request, its current window's counter; for a sliding window also
--       the previous window's counter right after it.
-- ARGV: per request five values: limit, hits, ttl (ms), flags, weight.
--       flags: 1 shadow (never denies), 2 refund (hits are given back),
--              4 sliding (estimate = previous * weight + current).
-- Returns {allowed, then per request: current count, previous count, over}.
--
-- Either every non-shadow counter has room and all are counted, or nothing is
-- written: a denied request consumes no quota. A counter is created with a TTL
-- of its window plus one second and the TTL is never extended.
local n = #ARGV / 5
local cur, prev, over, keyOf = {}, {}, {}, {}
local pending = {}
local allowed = 1
local ki = 1
for i = 1, n do
  local b = (i - 1) * 5
  local limit = tonumber(ARGV[b + 1])
  local hits = tonumber(ARGV[b + 2])
  local flags = tonumber(ARGV[b + 4])
  local k = KEYS[ki]
  ki = ki + 1
  keyOf[i] = k
  local c = tonumber(redis.call('GET', k) or '0')
  local p = 0
  if flags % 8 >= 4 then
    p = tonumber(redis.call('GET', KEYS[ki]) or '0')
    ki = ki + 1
  end
  cur[i], prev[i], over[i] = c, p, 0
  if flags % 4 < 2 then
    local need = hits
    if need < 1 then need = 1 end
    local est = c + (pending[k] or 0)
    if flags % 8 >= 4 then est = p * tonumber(ARGV[b + 5]) + est end
    if est + need > limit then
      over[i] = 1
      if flags % 2 == 0 then allowed = 0 end
    end
    pending[k] = (pending[k] or 0) + hits
  end
end
if allowed == 1 then
  for i = 1, n do
    local b = (i - 1) * 5
    local hits = tonumber(ARGV[b + 2])
    local k = keyOf[i]
    if hits > 0 then
      if tonumber(ARGV[b + 4]) % 4 >= 2 then
        local c = tonumber(redis.call('GET', k) or '0')
        if c > 0 then
          local v = c - hits
          if v < 0 then v = 0 end
          redis.call('SET', k, v, 'KEEPTTL')
          cur[i] = v
        end
      else
        local v = redis.call('INCRBY', k, hits)
        if v == hits then redis.call('PEXPIRE', k, ARGV[b + 3]) end
        cur[i] = v
      end
    end
  end
end
local out = {allowed}
for i = 1, n do
  out[#out + 1] = cur[i]
  out[#out + 1] = prev[i]
  out[#out + 1] = over[i]
end
return out
