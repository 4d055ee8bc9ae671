-- The sliding window's section of take.lua (see its head): a fixed
-- window's counters, read with the previous window's, whose key follows.
-- Its values: limit, hits, ttl (ms), flags, weight (the share of the
-- previous window a rolling window ending now still covers).

ALGORITHMS[SLIDING] = {
  -- decide: over when previous * weight + the count, with pending hits,
  -- + its own (one for a check) passes the limit, in that order, as every
  -- store computes it.
  decide = function(k, b, ki, hits, pending, refund)
    local limit, weight = tonumber(ARGV[b]), tonumber(ARGV[b + 4])
    local c = count[k]
    if c == nil then c = counter(k) end
    local p = count[KEYS[ki]]
    if p == nil then p = counter(KEYS[ki]) end
    local o = 0
    if c and p and not refund then
      local need = hits
      if need < 1 then need = 1 end
      if p * weight + (c + pending) + need > limit then o = 1 end
    end
    return c, p, o, ki + 1
  end,
  count = function(k, b, hits, refund, status, _, flags)
    if counts(hits, status, flags) then return countWindow(k, b, hits, refund) end
  end,
}
