-- commit.lua: write one client's new state into a bucket's hash, only if
-- the bucket is still at the version the caller read.
--
-- KEYS[1]  the bucket's hash
-- ARGV[1]  version  the "v" the caller read ("0" for a missing hash)
-- ARGV[2]  ttl_ms   PEXPIRE of the hash after the write
-- ARGV[3]  field    the client's field
-- ARGV[4]  state    its new state
-- ARGV[5..] fields of expired clients to delete
--
-- Returns 1 when written, else the hash as HGETALL returns it (the caller
-- divides again on it).
local key = KEYS[1]
local version = ARGV[1]
local ttl_ms = ARGV[2]
local field = ARGV[3]
local state = ARGV[4]

local current = redis.call('HGET', key, 'v') or '0'
if current ~= version then
  return redis.call('HGETALL', key)
end
redis.call('HINCRBY', key, 'v', 1)
redis.call('HSET', key, field, state)
for i = 5, #ARGV do
  redis.call('HDEL', key, ARGV[i])
end
redis.call('PEXPIRE', key, ttl_ms)
return 1
