-- commit.lua: write one client's new state into a bucket's hash, only if
-- the bucket is still at the version the caller divided on.
--
-- KEYS[1]  the bucket's hash
-- ARGV[1]  expected  the version the caller saw ("" for no hash)
-- ARGV[2]  next      the version this write sets: unique, never reused, so
--                    a hash that expired and was written again can never
--                    match a version seen before it expired
-- ARGV[3]  ttl_ms    PEXPIRE of the hash after the write
-- ARGV[4]  field     the client's field
-- ARGV[5]  state     its new state
-- ARGV[6..] fields of expired clients to delete
--
-- Returns 1 when written, else the hash as HGETALL returns it (the caller
-- divides again on it).
local key = KEYS[1]
local expected = ARGV[1]
local next_version = ARGV[2]
local ttl_ms = ARGV[3]
local field = ARGV[4]
local state = ARGV[5]

local current = redis.call('HGET', key, 'v') or ''
if current ~= expected then
  return redis.call('HGETALL', key)
end
redis.call('HSET', key, 'v', next_version, field, state)
for i = 6, #ARGV do
  redis.call('HDEL', key, ARGV[i])
end
redis.call('PEXPIRE', key, ttl_ms)
return 1
