-- The leaky bucket of docs/design.md, Semantics, as a Redis script, for
-- dthrottle-load's comparison: tokens and last per key in a hash, refilled
-- at rate up to burst, one token per served query. The key expires once
-- its bucket would be full again, so Redis, like dthrottled, keeps only the
-- tags active lately. KEYS[1] is the tag, ARGV[1] the rate (tokens per
-- second), ARGV[2] the burst. Returns 1 (OK) or 0 (NO).
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 't', 'l')
local tokens = tonumber(b[1])
local last = tonumber(b[2])
if tokens == nil then
  tokens = burst
  last = now
end
if now > last then
  tokens = math.min(burst, tokens + rate * (now - last))
  last = now
end
local ok = 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
end
redis.call('HSET', KEYS[1], 't', tokens, 'l', last)
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000))
return ok
