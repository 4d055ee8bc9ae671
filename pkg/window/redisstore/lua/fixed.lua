-- The fixed window's section of take.lua (see its head): one integer
-- counter per window, on a shared key counted in Lua (count), on any other
-- in Redis. Its values: limit, hits, ttl (ms; s for REF), flags, 0.

-- countWindow counts (or, refunding, gives back) the hits of the fixed or
-- sliding window counter at ARGV[b] on key k: a shared key in Lua, written
-- after the requests, any other in Redis. It returns the count after: 0
-- when a refund found nothing to give back, although the counter read 1 or
-- more before the request (an earlier refund of it emptied it).
local function countWindow(k, b, hits, refund)
  local ttl = ARGV[b + 2]
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
    if c == 0 then ttlOf[k] = ttl end
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
  if v == hits then redis.call('PEXPIRE', k, ttl) end
  return v
end

ALGORITHMS[0] = {
  -- decide: over when the count, with pending hits and its own, passes the
  -- limit; a check (0 hits) only past it, as envoyproxy/ratelimit.
  decide = function(k, b, ki, hits, pending, refund)
    local limit = tonumber(ARGV[b])
    local c = count[k]
    if c == nil then c = counter(k) end
    local o = 0
    if c and not refund and c + pending + hits > limit then o = 1 end
    return c, 0, o, ki
  end,
  -- count: a REF counter as envoyproxy/ratelimit counts it (see the head),
  -- any other as a window.
  count = function(k, b, hits, refund, status, over, flags)
    if has(flags, REF) and not refund then
      local add, ttl = ARGV[b + HITS], ARGV[b + 2] -- ttl in seconds, EXPIRE's
      if status ~= 1 and over == 0 and not has(flags, CHARGE) then add = 0 end
      local v = redis.call('INCRBY', k, add)
      redis.call('EXPIRE', k, ttl)
      return v
    end
    if counts(hits, status, flags) then return countWindow(k, b, hits, refund) end
  end,
}
