-- dthrottle for HAProxy: an http-request action that asks dthrottled on its
-- Unix socket, in the line protocol, whether to serve the client's address
-- (a tag and "\n"; the answer "OK\n" or "NO\n"). On NO it sets the variable
-- txn.dthrottle to "NO" and the headers' values in txn.dthrottle_retry,
-- txn.dthrottle_policy and txn.dthrottle_ratelimit, for haproxy.cfg to
-- answer 429. Any failure (no daemon, a timeout, a bad answer) serves the
-- request: fail open.
--
-- This action opens a Unix socket connection per request (no TCP
-- handshake, no network): the simplest way. dthrottle_pool.lua keeps a pool
-- of connections per thread and costs far less (see
-- docs/integrations/haproxy.md).
--
-- Settings, from the environment (haproxy.cfg: presetenv):
--   DTHROTTLE_SOCKET      dthrottled's listen.unix
--   DTHROTTLE_TIMEOUT_MS  the most a query may take, default 5
--   DTHROTTLE_PREFIX      put before the address, to select a [[policy]]
--   DTHROTTLE_RATE, DTHROTTLE_BURST, DTHROTTLE_POLICY
--                         the policy's rate, burst and name, for the
--                         headers of a refusal: the line protocol says only
--                         NO, so Retry-After (one token's time) and
--                         RateLimit (no token left, full again after
--                         burst/rate) are computed from them, approximately.

local socket_path = os.getenv("DTHROTTLE_SOCKET") or "/run/dthrottle/dthrottle.sock"
local timeout = (tonumber(os.getenv("DTHROTTLE_TIMEOUT_MS")) or 5) / 1000
local prefix = os.getenv("DTHROTTLE_PREFIX") or ""
local rate = tonumber(os.getenv("DTHROTTLE_RATE")) or 1
local burst = tonumber(os.getenv("DTHROTTLE_BURST")) or 10
local policy = os.getenv("DTHROTTLE_POLICY") or "default"

local retry = tostring(math.max(1, math.ceil(1 / rate)))
local window = tostring(math.max(1, math.ceil(burst / rate)))
local policy_header = string.format('"%s";q=%d;w=%s', policy, burst, window)
local ratelimit_header = string.format('"%s";r=0;t=%s', policy, window)

core.register_action("dthrottle", { "http-req" }, function(txn)
	local tag = prefix .. (txn.f:src() or "")
	if tag == "" or tag:find("[%z\r\n]") then
		return -- never a tag that would break the line protocol
	end
	local s = core.tcp()
	s:settimeout(timeout)
	if not s:connect("unix@" .. socket_path) then
		s:close()
		return
	end
	local reply
	if s:send(tag .. "\n") then
		reply = s:receive("*l")
	end
	s:close()
	if reply == "NO" then
		txn:set_var("txn.dthrottle", "NO")
		txn:set_var("txn.dthrottle_retry", retry)
		txn:set_var("txn.dthrottle_policy", policy_header)
		txn:set_var("txn.dthrottle_ratelimit", ratelimit_header)
	end
end)
