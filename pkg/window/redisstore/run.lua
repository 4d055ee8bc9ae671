-- The full form and the requests: the tail of take.lua (see its head),
-- after the algorithms' sections.

-- full decides a request of n counters whose values start at ARGV[a] and
-- whose first key is KEYS[ki]: it reads every counter, decides, and only
-- then writes, so a denial writes nothing but its charges. Each counter's
-- algorithm (ALGORITHMS) decides and counts it.
local function full(n, a, ki)
  local cur, prev, over, keyOf = {}, {}, {}, {}
  local status = 1
  local pending = {}
  local state = {}
  for i = 1, n do
    local b = a + (i - 1) * COUNTER_ARGS
    local hits = tonumber(ARGV[b + HITS])
    local flags = tonumber(ARGV[b + FLAGS])
    local refund = has(flags, REFUND)
    local k = KEYS[ki]
    keyOf[i] = k
    local c, p, o
    c, p, o, ki = ALGORITHMS[kind(flags)].decide(k, b, ki + 1, hits, pending[k] or 0, refund, state)
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
      local c, p = ALGORITHMS[kind(flags)].count(keyOf[i], b, hits, has(flags, REFUND), status, over[i], flags, state)
      if c then cur[i] = c end
      if p then prev[i] = p end
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
