#!lua flags=allow-cross-slot-keys
-- cross.lua: the head of take.lua for a call whose keys lie on several hash
-- slots of one Redis Cluster node (Redis 7.0 or later); the store sends the
-- two as one script, this file first.
--
-- A node refuses a call whose declared keys span slots (CROSSSLOT) before
-- running it, whatever the script's flags, so this call declares none: ARGV
-- holds take.lua's arguments, then its keys, then the number of keys. The
-- allow-cross-slot-keys flag lets the script touch keys of every slot the
-- node serves. Before anything is written, every key is checked to be
-- served here (a slot that moved, or a key already migrated out of a slot
-- in migration, is not): if one is not, the call answers NOTLOCAL, naming
-- the key, having written nothing, and the store sends the requests again
-- per slot (see redoCross in pipeline.go). Redis runs a script alone, so what the
-- check saw holds until the script ends.
local nargs = #ARGV
local nkeys = tonumber(ARGV[nargs])
local nfirst = nargs - nkeys - 1 -- take.lua's arguments are ARGV[1..nfirst]
local keys, args = {}, {}
for i = 1, nkeys do
  local k = ARGV[nfirst + i]
  local r = redis.pcall('EXISTS', k)
  if type(r) == 'table' and r.err then
    return redis.error_reply('NOTLOCAL ' .. k .. ': ' .. r.err)
  end
  keys[i] = k
end
for i = 1, nfirst do args[i] = ARGV[i] end
-- take.lua reads KEYS and ARGV as locals: these.
local KEYS, ARGV = keys, args
