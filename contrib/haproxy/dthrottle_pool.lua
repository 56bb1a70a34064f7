-- dthrottle_pool.lua: HAProxy 2.6 asks dthrottled once per request over
-- its line protocol ("tag\n" -> "OK\n" or "NO\n") with a Lua action and
-- HAProxy sockets (core.tcp), keeping the connections: each thread has its
-- own pool of open connections to the Unix socket, and a request takes an
-- idle one (or opens one), asks, and puts it back. A connection is used by
-- one request at a time, so every answer is its own. Opening a connection
-- per request costs HAProxy an internal stream and a garbage collection
-- each; a kept one costs a write and a read.
--
-- Load it once per thread (lua-load-per-thread: the pool is the thread's),
-- after setting, in the global section:
--   setenv DTHROTTLE_SOCKET /run/dthrottle/dthrottle.sock
--   setenv DTHROTTLE_RATE 1      the policy's rate and burst, for the
--   setenv DTHROTTLE_BURST 10    headers of a refusal
-- optional: DTHROTTLE_POLICY (its name, "default"), DTHROTTLE_PREFIX (put
-- before every tag, to select a [[policy]]), DTHROTTLE_TIMEOUT_MS (20),
-- DTHROTTLE_POOL (idle connections kept per thread, 64), DTHROTTLE_FAIL
-- ("open", or "closed" to refuse while dthrottled does not answer).
--
-- The action "dthrottle" asks for the client's address (src), or for
-- txn.dthrottle_tag when set (http-request set-var(txn.dthrottle_tag)
-- req.hdr(x-api-key) before it), and sets txn.dthrottle to "OK" or "NO"; on "NO" it
-- sets txn.dthrottle_retry, txn.dthrottle_policy and txn.dthrottle_limit,
-- the values of Retry-After, RateLimit-Policy and RateLimit: the line
-- protocol says only OK or NO, so they are computed from rate and burst,
-- approximately (Retry-After is one token's time, at least 1 s).
--
-- Failures: no answer within the timeout, no daemon, a nonsense answer:
-- the connection is closed (a late answer can never answer a later
-- request), the request is served (fail open: txn.dthrottle is "FAIL"), and
-- the thread backs off, asking nothing for 10 ms doubling up to 2 s. An
-- idle connection the daemon closed is replaced at once; one idle for
-- over half the timeout is closed, never used (see query).
-- A tag with CR or LF, or over 1024 bytes, is never sent: refused.
local socket = "unix@" .. (os.getenv("DTHROTTLE_SOCKET") or "/run/dthrottle/dthrottle.sock")
local rate = tonumber(os.getenv("DTHROTTLE_RATE") or "1")
local burst = tonumber(os.getenv("DTHROTTLE_BURST") or "10")
local policy = os.getenv("DTHROTTLE_POLICY") or "default"
local prefix = os.getenv("DTHROTTLE_PREFIX") or ""
local timeout = tonumber(os.getenv("DTHROTTLE_TIMEOUT_MS") or "20")
local pool_size = tonumber(os.getenv("DTHROTTLE_POOL") or "64")
local fail_open = (os.getenv("DTHROTTLE_FAIL") or "open") ~= "closed"
if not rate or rate <= 0 or not burst or burst < 1 or not timeout or timeout <= 0 or not pool_size or pool_size < 0 then
	error("dthrottle_pool.lua: DTHROTTLE_RATE must be > 0, DTHROTTLE_BURST >= 1, DTHROTTLE_TIMEOUT_MS > 0, DTHROTTLE_POOL >= 0")
end
timeout = timeout / 1000
local max_tag = 1024

local ceil = math.ceil
local window = ceil(burst / rate)
local h_policy = string.format('"%s";q=%d;w=%d', policy, burst, window)
local h_limit = string.format('"%s";r=0;t=%d', policy, window)
local h_retry = tostring(math.max(1, ceil(1 / rate)))

-- The thread's idle connections (a stack), when each was put back, and
-- its backoff.
local idle, idle_at, nidle = {}, {}, 0
local down_until, backoff = 0, 0

local function clock()
	local t = core.now()
	return t.sec + t.usec / 1e6
end

local function failed(err)
	if backoff == 0 then
		core.Warning("dthrottle: daemon unreachable, failing " .. (fail_open and "open" or "closed") .. ": " .. tostring(err))
		backoff = 0.01
	else
		backoff = math.min(backoff * 2, 2)
	end
	down_until = clock() + backoff
end

-- ask sends tag on sock and returns the answer line, or nil and an error.
local function ask(sock, tag)
	local ok, err = sock:send(tag .. "\n")
	if not ok then
		return nil, err
	end
	return sock:receive("*l")
end

local function connect()
	local sock = core.tcp()
	sock:settimeout(timeout)
	local ok, err = sock:connect(socket)
	if not ok then
		sock:close()
		return nil, err
	end
	return sock
end

-- flush closes the thread's idle connections.
local function flush()
	for i = nidle, 1, -1 do
		idle[i]:close()
		idle[i], idle_at[i] = nil, nil
	end
	nidle = 0
end

-- query returns "OK", "NO", or nil and an error.
--
-- A query that may have reached the daemon is never sent again: the
-- daemon would spend a second token. HAProxy's sockets say "connection
-- closed." alike for a connection the daemon closed and for one whose
-- timeout ran out while it sat idle, so an idle connection is used only
-- within half the timeout of its last answer, with its timeout set anew
-- (older ones are closed: the stack's last in is the newest). A kept
-- connection that then fails at once, before half the timeout, is one
-- the daemon closed before reading the line (a restart): the tag is
-- asked once more on a new connection. One that fails later is not.
local function query(tag)
	local sock, line, err
	local start = clock()
	if nidle > 0 then
		if start - idle_at[nidle] < timeout / 2 then
			sock, idle[nidle], idle_at[nidle], nidle = idle[nidle], nil, nil, nidle - 1
			sock:settimeout(timeout)
			line, err = ask(sock, tag)
			if not line then
				sock:close()
				flush()
				if clock() - start >= timeout / 2 then
					return nil, err
				end
				sock = nil
			end
		else
			flush()
		end
	end
	if not sock then
		sock, err = connect()
		if not sock then
			return nil, err
		end
		line, err = ask(sock, tag)
	end
	if line ~= "OK" and line ~= "NO" then
		sock:close()
		return nil, err or ("answer " .. tostring(line))
	end
	if nidle < pool_size then
		nidle = nidle + 1
		idle[nidle], idle_at[nidle] = sock, clock()
	else
		sock:close()
	end
	return line
end

local function refuse(txn)
	txn:set_var("txn.dthrottle", "NO")
	txn:set_var("txn.dthrottle_retry", h_retry)
	txn:set_var("txn.dthrottle_policy", h_policy)
	txn:set_var("txn.dthrottle_limit", h_limit)
end

core.register_action("dthrottle", { "http-req" }, function(txn)
	local tag = txn:get_var("txn.dthrottle_tag") or txn.f:src() or ""
	if tag == "" then
		return txn:set_var("txn.dthrottle", "OK") -- unasked, as the daemon would
	end
	tag = prefix .. tag
	if #tag > max_tag or tag:find("[\r\n]") then
		return refuse(txn) -- it would put the answers out of step
	end
	if clock() < down_until then
		if fail_open then
			return txn:set_var("txn.dthrottle", "FAIL")
		end
		return refuse(txn)
	end
	local line, err = query(tag)
	if not line then
		failed(err)
		if fail_open then
			return txn:set_var("txn.dthrottle", "FAIL")
		end
		return refuse(txn)
	end
	if backoff ~= 0 then
		core.Info("dthrottle: daemon answering again")
		backoff = 0
	end
	if line == "NO" then
		return refuse(txn)
	end
	txn:set_var("txn.dthrottle", "OK")
end, 0)
