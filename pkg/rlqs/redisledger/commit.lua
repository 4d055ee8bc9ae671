-- commit.lua: write one client's new share into a bucket's hash. It always
-- writes: a bucket other replicas wrote meanwhile is not a failure, the cap
-- is enforced here instead.
--
-- When the bucket is still at the version the caller divided on, the
-- caller's division saw exactly this state and its grant keeps the
-- invariant: the state is written as given (O(1)). Otherwise, unless the
-- caller asks for the hash to divide again on (reread), the script caps
-- the grant itself: a grant no larger than what the client counts now is
-- written as is (O(1)); a raise gets min(the caller's grant, what the other
-- unexpired clients leave of the fleet's rate and burst at the caller's
-- now), O(clients). Σ counted ≤ the fleet's rate holds whatever the caller
-- computed from its stale copy.
--
-- KEYS[1]   the bucket's hash
-- ARGV[1]   expected   the version the caller divided on ("" for no hash)
-- ARGV[2]   next       the version this write sets: unique, never reused
-- ARGV[3]   pttl_ms    the hash lives at least this long after the write
-- ARGV[4]   field      the client's field
-- ARGV[5]   state      its new state, written as is on the current version
-- ARGV[6]   reread     "1": on another version, write nothing and answer
--                      the hash (the caller divides again on it)
-- ARGV[7]   now_ms     the caller's clock (Unix ms)
-- ARGV[8]   rate_cap   the fleet's rate (thousandths/s), at most 2^52
-- ARGV[9]   burst_cap  the fleet's burst, at most 2^52
-- ARGV[10]  min_burst  the least burst of a share with a rate
-- ARGV[11]  rate       the caller's grant
-- ARGV[12]  burst
-- ARGV[13]  demand     the state's first field, verbatim
-- ARGV[14]  tail       its last three, "expires_ms,reported_ms,estimated"
-- ARGV[15]  prev_ms    until when a decrease's old share counts (now + grace)
-- ARGV[16]  short      "1": the grant is below an even split of the rate,
--                      so the caller wants the others' decreases in flight
--                      (freed_ms) even for a grant that is no raise
-- ARGV[17..] fields of clients the caller found expired (deleted on the
--            current version only)
--
-- Returns 1 when written as given, else
-- {0, rate, burst, old_rate, old_burst, old_live, freed_ms, live, state}:
-- the share written, the client's share before (old_live 1 when it had not
-- expired), the first moment another client's decrease stops counting and
-- the unexpired clients with this one (both 0 when the grant was neither a
-- raise nor short, so the others were not read), and the state written;
-- or, when reread is "1" and the version differs, the hash as HGETALL
-- returns it, having written nothing.
local key = KEYS[1]
local expected, next_version = ARGV[1], ARGV[2]
local pttl = tonumber(ARGV[3])
local field = ARGV[4]

local function extend()
  local left = redis.call('PTTL', key)
  if left < pttl then
    redis.call('PEXPIRE', key, pttl)
  end
end

local current = redis.call('HGET', key, 'v') or ''
if current == expected then
  redis.call('HSET', key, 'v', next_version, field, ARGV[5])
  for i = 17, #ARGV do
    redis.call('HDEL', key, ARGV[i])
  end
  extend()
  return 1
end

if ARGV[6] == '1' then
  return redis.call('HGETALL', key)
end

local now = tonumber(ARGV[7])
local rate_cap, burst_cap = tonumber(ARGV[8]), tonumber(ARGV[9])
local min_burst = tonumber(ARGV[10])
local rate, burst = tonumber(ARGV[11]), tonumber(ARGV[12])
-- Values above 2^52 are above any cap: clamping them keeps the sums exact
-- while they can still matter.
local big = 4503599627370496

local function num(s)
  return math.min(tonumber(s), big)
end

-- counted is what a client's state may admit under at now (its share, or
-- a decrease's old one while that counts), whether it has expired, until
-- when the old share counts (0: none) and the share itself; nil for a value
-- this script cannot read.
local function counted(v)
  local r, b, pr, pb, pu, ex = string.match(v, '^%d+,(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),%d+,[01]$')
  if not r then
    return nil
  end
  r, b, pu = num(r), num(b), num(pu)
  if num(ex) <= now then
    return 0, 0, true, 0, r, b
  end
  if pu > now then
    return math.max(r, num(pr)), math.max(b, num(pb)), false, pu, r, b
  end
  return r, b, false, 0, r, b
end

local held_rate, held_burst, old_rate, old_burst, old_live = 0, 0, 0, 0, 0
local own = redis.call('HGET', key, field)
if own then
  local r, b, expired, _, share_rate, share_burst = counted(own)
  if r == nil then
    return redis.error_reply('bad client state in ' .. key .. ' ' .. field)
  end
  if not expired then
    held_rate, held_burst = r, b
    old_rate, old_burst, old_live = share_rate, share_burst, 1
  end
end

-- A grant no larger than what the client counts now cannot take the sum
-- above what it is (the others' counted shares only fall until they
-- write): only a raise needs the others' sum, O(clients), and a short
-- grant the moment it may grow.
local freed, live = 0, 0
local dead = {}
if rate > held_rate or burst > held_burst or ARGV[16] == '1' then
  local used_rate, used_burst = 0, 0
  live = 1
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local f = all[i]
    if f ~= 'v' and f ~= field then
      local r, b, expired, pu = counted(all[i + 1])
      if r == nil then
        return redis.error_reply('bad client state in ' .. key .. ' ' .. f)
      end
      if expired then
        dead[#dead + 1] = f
      else
        used_rate, used_burst, live = used_rate + r, used_burst + b, live + 1
        if pu > 0 and (freed == 0 or pu < freed) then
          freed = pu
        end
      end
    end
  end
  rate = math.min(rate, math.max(rate_cap - used_rate, 0))
  if rate == 0 then
    burst = 0
  else
    -- As the division: a burst within what the others leave, but never
    -- below the floor the caller gave (an error term of the guarantee).
    burst = math.max(math.min(burst, math.max(burst_cap - used_burst, 0)), math.min(burst, min_burst))
  end
end

-- A decrease from what the client counted: Envoy runs the old bucket until
-- the new one arrives.
local prev_rate, prev_burst, prev_until = 0, 0, '0'
if rate < held_rate or burst < held_burst then
  prev_rate, prev_burst, prev_until = math.max(rate, held_rate), math.max(burst, held_burst), ARGV[15]
end
local state = string.format('%s,%d,%d,%d,%d,%s,%s', ARGV[13], rate, burst, prev_rate, prev_burst, prev_until, ARGV[14])
redis.call('HSET', key, 'v', next_version, field, state)
for _, f in ipairs(dead) do
  redis.call('HDEL', key, f)
end
extend()
return {0, rate, burst, old_rate, old_burst, old_live, freed, live, state}
