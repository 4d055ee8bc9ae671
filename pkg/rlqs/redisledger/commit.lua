-- commit.lua: write one client's new share into a bucket's hash. It always
-- writes (but when the caller asks to divide again): a bucket other
-- replicas wrote meanwhile is not a failure, the cap is enforced here.
--
-- The hash keeps, beside the version "v" and the clients, a bound "u" =
-- "rate,burst,scanned_ms": at least the sum of every client's counted rate
-- and burst (its share, or a decrease's old one while that counts) from
-- scanned_ms on. A scan sets it to the exact sums; every write that raises
-- a client's counted share adds the raise; nothing lowers it but the next
-- scan (decreases and expiries only make it looser).
--
-- When the bucket is still at the version the caller divided on, the
-- caller's division saw exactly this state and its grant keeps the
-- invariant: the state is written as given (O(1)). Otherwise, unless the
-- caller asks for the hash to divide again on (reread), the script caps
-- the grant itself: a grant no larger than what the client counts is
-- written as is; a raise that fits under the bound too (O(1)); else, at
-- most once per scan_ms per bucket, a scan of the clients (O(clients))
-- sets the bound exactly and the grant gets min(the caller's grant, what
-- the others leave); between scans the raise gets what the bound leaves.
-- So Σ counted ≤ the fleet's rate holds whatever the caller computed from
-- its stale copy.
--
-- KEYS[1]   the bucket's hash
-- ARGV[1]   "expected,next,reread,pttl_ms,now_ms,rate_cap,burst_cap,
--           min_burst,rate,burst,prev_ms,scan_ms" (one argument, so the
--           caller formats and Redis reads one string, not twelve):
--   expected   the version the caller divided on ("" for no hash)
--   next       the version this write sets: unique, never reused
--   reread     "1": on another version, write nothing and answer the
--              hash (the caller divides again on it)
--   pttl_ms    the hash lives at least this long after the write
--   now_ms     the caller's clock (Unix ms)
--   rate_cap   the fleet's rate (thousandths/s), at most 2^52
--   burst_cap  the fleet's burst, at most 2^52
--   min_burst  the least burst of a share with a rate
--   rate       the caller's grant
--   burst
--   prev_ms    until when a decrease's old share counts (now + grace)
--   scan_ms    the least time between two scans of the bucket
-- ARGV[2]   field      the client's field
-- ARGV[3]   state      its new state, written as is on the current version
-- ARGV[4..] fields of clients the caller found expired (deleted on the
--            current version only)
--
-- Returns 1 when written as given, else
-- {0, rate, burst, old_rate, old_burst, old_live, freed_ms, live, state}:
-- the share written, the client's share before (old_live 1 when it had not
-- expired), when the client may get more (the first moment another
-- client's decrease stops counting, or the next scan when the bound held
-- it back; 0: no sooner than its next report), the unexpired clients with
-- this one when it scanned (0: no scan), and the state written; or, when
-- reread is "1" and the version differs, the hash as HGETALL returns it,
-- having written nothing.
local key = KEYS[1]
local expected, next_version, reread, pttl, now, rate_cap, burst_cap, min_burst, rate, burst, prev_ms, scan_ms =
  string.match(ARGV[1], '^([%w%-]*),(%w+),([01]),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+)$')
if not expected then
  return redis.error_reply('commit.lua: bad arguments ' .. ARGV[1])
end
pttl, now = tonumber(pttl), tonumber(now)
rate_cap, burst_cap, min_burst = tonumber(rate_cap), tonumber(burst_cap), tonumber(min_burst)
rate, burst, scan_ms = tonumber(rate), tonumber(burst), tonumber(scan_ms)
local field, new_state = ARGV[2], ARGV[3]

-- The version, the client's own state and the bound, in one call.
local got = redis.call('HMGET', key, 'v', field, 'u')
local current, own, u = got[1] or '', got[2], got[3]
if current ~= expected and reread == '1' then
  return redis.call('HGETALL', key)
end

-- Values above 2^52 are above any cap: clamping them keeps the sums exact
-- while they can still matter (Lua's numbers are doubles).
local big = 4503599627370496

local function num(s)
  return math.min(tonumber(s), big)
end

-- counted is what a client's state may admit under at now (its share, or
-- a decrease's old one while that counts), whether it has expired, until
-- when the old share counts (0: none) and the share itself; nil for a value
-- this script cannot read.
local function counted(v)
  local r, b, pr, pb, pu, ex, fleet = string.match(v, '^%d+,(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),%d+,[01](.*)$')
  if not r or fleet ~= '' and not string.match(fleet, '^,%d+$') then
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

local function bad(f)
  return redis.error_reply('bad client state in ' .. key .. ' ' .. f)
end

-- The client's own share before this write.
local held_rate, held_burst, old_rate, old_burst, old_live = 0, 0, 0, 0, 0
if own then
  local r, b, expired, _, share_rate, share_burst = counted(own)
  if r == nil then
    return bad(field)
  end
  if not expired then
    held_rate, held_burst = r, b
    old_rate, old_burst, old_live = share_rate, share_burst, 1
  end
end

-- scan sums what the other unexpired clients count at now, deletes the
-- expired ones, and sets the bound exactly (with the client's held share).
local freed, live, scanned = 0, 0, 0
local function scan()
  local used_rate, used_burst = 0, 0
  live = 1
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local f = all[i]
    if f ~= 'v' and f ~= 'u' and f ~= field then
      local r, b, expired, pu = counted(all[i + 1])
      if r == nil then
        return nil, f
      end
      if expired then
        redis.call('HDEL', key, f)
      else
        used_rate, used_burst, live = used_rate + r, used_burst + b, live + 1
        if pu > 0 and (freed == 0 or pu < freed) then
          freed = pu
        end
      end
    end
  end
  scanned = now
  return used_rate, used_burst
end

local u_rate, u_burst
if u then
  local a, b, c = string.match(u, '^(%d+),(%d+),(%d+)$')
  if not a then
    return bad('u')
  end
  u_rate, u_burst, scanned = tonumber(a), tonumber(b), tonumber(c)
else
  -- A new bucket, or one written before the bound: one scan sets it.
  local r, b = scan()
  if r == nil then
    return bad(b)
  end
  u_rate, u_burst = r + held_rate, b + held_burst
end

-- finish writes the client's state, the new version and the bound,
-- recording a write of counted share (rate, burst), and extends the
-- hash's life to the client's share's.
local function finish(state, new_rate, new_burst)
  -- Capped far above any cap, so the bound still holds every raise back
  -- and prints as an integer.
  u_rate = math.min(u_rate + math.max(new_rate - held_rate, 0), 2 ^ 60)
  u_burst = math.min(u_burst + math.max(new_burst - held_burst, 0), 2 ^ 60)
  redis.call('HSET', key, 'v', next_version, field, state, 'u', string.format('%d,%d,%d', u_rate, u_burst, scanned))
  local left = redis.call('PTTL', key)
  if left < pttl then
    redis.call('PEXPIRE', key, pttl)
  end
end

if current == expected then
  for i = 4, #ARGV do
    redis.call('HDEL', key, ARGV[i])
  end
  -- The division's own decrease bookkeeping: a decrease counts its old
  -- share, which is no raise.
  finish(new_state, math.max(rate, held_rate), math.max(burst, held_burst))
  return 1
end

local function floor_burst(b, room)
  if rate == 0 then
    return 0
  end
  -- As the division: within the room, but never below the floor the
  -- caller gave (an error term of the guarantee).
  return math.max(math.min(b, math.max(room, 0)), math.min(b, min_burst))
end

if rate > held_rate or burst > held_burst then
  if rate > held_rate + math.max(rate_cap - u_rate, 0) or burst > held_burst + math.max(burst_cap - u_burst, 0) then
    if now - scanned >= scan_ms then
      local r, b = scan()
      if r == nil then
        return bad(b)
      end
      u_rate, u_burst = r + held_rate, b + held_burst
      rate = math.min(rate, math.max(rate_cap - r, 0))
      burst = floor_burst(burst, burst_cap - b)
    else
      rate = math.min(rate, held_rate + math.max(rate_cap - u_rate, 0))
      burst = floor_burst(burst, held_burst + burst_cap - u_burst)
      freed = scanned + scan_ms
    end
  end
end

-- A decrease from what the client counted: Envoy runs the old bucket until
-- the new one arrives.
local prev_rate, prev_burst, prev_until = 0, 0, '0'
if rate < held_rate or burst < held_burst then
  prev_rate, prev_burst, prev_until = math.max(rate, held_rate), math.max(burst, held_burst), prev_ms
end
-- The caller's state around the share fields: its demand, and expires,
-- reported, estimated and the fleet's rate.
local demand, tail = string.match(new_state, '^(%d+),%d+,%d+,%d+,%d+,%d+,(%d+,%d+,[01],%d+)$')
if not demand then
  return redis.error_reply('commit.lua: bad state ' .. new_state)
end
local state = string.format('%s,%d,%d,%d,%d,%s,%s', demand, rate, burst, prev_rate, prev_burst, prev_until, tail)
finish(state, math.max(rate, prev_rate), math.max(burst, prev_burst))
return {0, rate, burst, old_rate, old_burst, old_live, freed, live, state}
