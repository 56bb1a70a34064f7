-- dthrottle_shared.lua: HAProxy 2.6 decides dthrottled's queries in its
-- own process, from the table the daemon shares over its Unix socket
-- (docs/shared-table.md), through the Lua C module dthrottle_shared.so
-- (contrib/haproxy/dthrottle_shared.c, libdthrottle compiled in). A tag the
-- table holds costs a hash, a probe and one compare-and-swap in HAProxy's
-- address space: no system call, no lock, nothing sent.
--
-- Load it once per thread (lua-load-per-thread; the shared state of
-- lua-load is refused), after setting, in the global section (presetenv):
--   DTHROTTLE_SOCKET        dthrottled's listen.unix ("@name": abstract)
--   DTHROTTLE_TIMEOUT_MS    the most an ask or a probe may take, 20
--   DTHROTTLE_FAIL          "open" (serve while dthrottled is away) or "closed"
--   DTHROTTLE_PREFIX        put before every tag, to select a [[policy]]
--   DTHROTTLE_POLICY        the default policy's name in the headers, "default"
--   DTHROTTLE_NAMES         "name=prefix name=prefix": the names, in the
--                           headers, of the [[policy]] of those prefixes,
--                           over those the table states (a daemon that
--                           shares none names a policy by its index)
--   DTHROTTLE_RATE, DTHROTTLE_BURST
--                           the default policy's rate and burst, for the
--                           headers of refusals the table did not decide
--   DTHROTTLE_BAD_TAG       "deny" (refuse) or "allow" a tag with CR or LF,
--                           or over DTHROTTLE_MAX_TAG (1024) bytes, prefix
--                           included
--   DTHROTTLE_POOL          idle connections kept per thread for asking, 64
-- and in the frontend (haproxy-shared.cfg):
--   http-request lua.dthrottle_resolve unless { src,lua.dthrottle_decide -m bool }
--   http-request return status 429 ... if { var(txn.dthrottle) -m str NO }
-- Any sample may be the tag: req.hdr(x-api-key),lua.dthrottle_decide.
--
-- The converter dthrottle_decide, a C function, decides the tag from the
-- table and answers true when it is served: that is all a request the
-- table serves costs. Otherwise the action dthrottle_resolve, which
-- HAProxy runs next in the same rule and on the same thread, takes what
-- the converter left (dt.take) and finishes:
--   NO    the table refused: txn.dthrottle is "NO", and txn.dthrottle_retry,
--         txn.dthrottle_policy and txn.dthrottle_limit are the values of
--         Retry-After, RateLimit-Policy and RateLimit for the bucket that
--         refused, computed by the module (dt.headers: libdthrottle's
--         dt_headers, the daemon's arithmetic); a deny policy has no
--         bucket: no headers;
--   ASK   a tag the table does not hold yet (its first request), one
--         longer than the daemon keeps verbatim, a reload under way, a
--         daemon that shares nothing, or a process not attached yet:
--         asked over the line protocol on a connection from the thread's
--         pool, with HAProxy's non-blocking sockets (core.tcp); the
--         daemon inserts a new tag, so its next request is decided in
--         process. An ask not answered within the timeout, or a daemon
--         that cannot be reached, is answered by the fail mode
--         (txn.dthrottle "FAIL", or a refusal), and the thread asks
--         nothing for a while (50 ms doubling up to 5 s);
--   LEFT  the daemon stopped, or has not beaten for a second: the fail
--         mode answers at once, and a task attaches again;
--   BAD   a tag the line protocol could not carry: refused (or served,
--         DTHROTTLE_BAD_TAG allow), logged once per thread.
-- A refusal the table did not decide (asked, fail closed, a bad tag) has
-- no bucket to read: its headers are those of an empty bucket of
-- DTHROTTLE_RATE and DTHROTTLE_BURST (approximate).
--
-- Attaching blocks for one exchange with the daemon on its Unix socket
-- (dt_open, dt_reattach), a few tens of microseconds. It runs only from a
-- task (core.register_task), one at a time in the process, and only after
-- the daemon answered an empty line over a core.tcp socket within the
-- timeout, so a daemon that is down or hung never stalls a request; a
-- failed attempt waits 50 ms, doubling up to 5 s. The first attach starts
-- with the worker; until it is done, requests are asked. The outage and
-- the recovery are logged once each per process.
--
-- Trust: whoever may connect to the daemon's socket may decide. HAProxy
-- maps the state file writable, as every attached process does.
if core.thread == 0 then
	error("dthrottle_shared.lua: load it with lua-load-per-thread: each thread keeps its own decisions' state")
end
local dt = require("dthrottle_shared")

local function env(name, default)
	local v = os.getenv(name)
	if v == nil or v == "" then
		return default
	end
	return v
end

local path = env("DTHROTTLE_SOCKET", "/run/dthrottle/dthrottle.sock")
local timeout = tonumber(env("DTHROTTLE_TIMEOUT_MS", "20"))
local fail_mode = env("DTHROTTLE_FAIL", "open")
local prefix = env("DTHROTTLE_PREFIX", "")
local policy = env("DTHROTTLE_POLICY", "default")
local rate = tonumber(env("DTHROTTLE_RATE", "1"))
local burst = tonumber(env("DTHROTTLE_BURST", "10"))
local bad_tag = env("DTHROTTLE_BAD_TAG", "deny")
local max_tag = tonumber(env("DTHROTTLE_MAX_TAG", "1024"))
local pool_size = tonumber(env("DTHROTTLE_POOL", "64"))
if not (timeout and timeout > 0 and rate and rate > 0 and burst and burst >= 1 and pool_size and pool_size >= 0) then
	error("dthrottle_shared.lua: DTHROTTLE_TIMEOUT_MS and DTHROTTLE_RATE must be > 0, DTHROTTLE_BURST >= 1, DTHROTTLE_POOL >= 0")
end
if fail_mode ~= "open" and fail_mode ~= "closed" then
	error('dthrottle_shared.lua: DTHROTTLE_FAIL must be "open" or "closed"')
end
if bad_tag ~= "deny" and bad_tag ~= "allow" then
	error('dthrottle_shared.lua: DTHROTTLE_BAD_TAG must be "deny" or "allow"')
end
timeout = timeout / 1000
local address = path:sub(1, 1) == "@" and "abns@" .. path:sub(2) or "unix@" .. path
local fail_open, allow_bad = fail_mode == "open", bad_tag == "allow"
local retry_min, retry_max = 0.05, 5 -- s, asking after a failed ask

dt.configure { socket = path, prefix = prefix, max_tag = max_tag }
local take, count = dt.take, dt.count

local min, floor, fmt, find = math.min, math.floor, string.format, string.find

-- The [[policy]] names by prefix, longest first as the daemon matches
-- them.
local names = {}
for pair in env("DTHROTTLE_NAMES", ""):gmatch("%S+") do
	local name, p = pair:match("^([^=]+)=(.+)$")
	if not name then
		error("dthrottle_shared.lua: DTHROTTLE_NAMES: want name=prefix, not " .. pair)
	end
	names[#names + 1] = { p, name }
end
table.sort(names, function(a, b)
	return #a[1] > #b[1] or (#a[1] == #b[1] and a[1] < b[1])
end)

-- The headers of a refusal the table did not decide: an empty bucket,
-- a token in 1 / rate seconds, full in burst / rate.
local h_policy, h_limit, h_retry = dt.headers(policy, floor(burst), rate, false, 0,
	floor(min(1e9 / rate, 2 ^ 62)), floor(min(burst / rate * 1e9, 2 ^ 62)))

-- The thread's idle connections for asking (a stack: the last put back
-- on top) and when each began its last exchange, and its backoff.
local idle, idle_at, nidle = {}, {}, 0
local ask_until, ask_backoff = 0, 0
local bad_logged = false

local function clock()
	local t = core.now()
	return t.sec + t.usec / 1e6
end

-- refuse refuses, with the values of RateLimit-Policy, RateLimit and
-- Retry-After given (none for a deny policy).
local function refuse(txn, pol, limit, retry)
	txn:set_var("txn.dthrottle", "NO")
	if retry then
		txn:set_var("txn.dthrottle_retry", retry)
	end
	if pol then
		txn:set_var("txn.dthrottle_policy", pol)
		txn:set_var("txn.dthrottle_limit", limit)
	end
end

local function refuse_guess(txn)
	return refuse(txn, h_policy, h_limit, h_retry)
end

-- policy_name is the name of tag's policy (a [[policy]]): the name
-- DTHROTTLE_NAMES gives its prefix, else the one the table states, else
-- the default policy's.
local function policy_name(tag, stated)
	for _, p in ipairs(names) do
		if find(tag, p[1], 1, true) == 1 then
			return p[2]
		end
	end
	return stated or policy
end

-- refuse_table refuses with the headers of the bucket that refused, its
-- policy as the table states it (burst and rate nil while the daemon
-- rewrites its policies: Retry-After alone).
local function refuse_table(txn, tag, pol, retry, reset, stated, burst, rate)
	if reset <= 0 then
		return refuse(txn) -- a deny policy
	end
	local name = rate and (pol > 0 and policy_name(tag, stated) or policy)
	return refuse(txn, dt.headers(name, burst or 0, rate or 0, false, 0, retry, reset))
end

-- fail answers by the fail mode.
local function fail(txn)
	count("failed")
	if fail_open then
		return txn:set_var("txn.dthrottle", "FAIL")
	end
	return refuse_guess(txn)
end

-- probe asks the daemon an empty line, answered OK: true when it answers
-- within the timeout, so that attaching will not block for long.
local function probe()
	local sock = core.tcp()
	sock:settimeout(timeout)
	local ok, err = sock:connect(address)
	local line
	if ok then
		ok, err = sock:send("\n")
		if ok then
			line, err = sock:receive("*l")
		end
	end
	sock:close()
	if line ~= "OK" then
		return nil, "probe " .. path .. ": " .. tostring(line or err)
	end
	return true
end

-- attach_task attaches the process (claim held): a probe, then the
-- module's blocking attach, then release, which says what to log.
local function attach_task()
	local pok, ok, err = pcall(probe)
	if pok and ok then
		pok, ok, err = pcall(dt.attach)
	end
	if not pok then
		ok, err = nil, ok -- the error raised
	end
	local event = dt.release(ok)
	if event == "detached" then
		core.Warning("dthrottle: detached from " .. path .. ", failing " .. fail_mode .. ": " .. tostring(err))
	elseif event == "attached" then
		core.Info("dthrottle: attached to " .. path ..
			(dt.shared() and ": deciding in process" or ": the daemon shares no table, asking"))
	end
end

-- kick attaches again from a task, unless an attach is under way in the
-- process or its backoff holds.
local function kick()
	if not dt.claim() then
		return
	end
	local ok, err = pcall(core.register_task, attach_task)
	if not ok then
		dt.release(false)
		core.Warning("dthrottle: cannot start a task to attach: " .. tostring(err))
	end
end

-- exchange asks tag on sock: the answer line, or nil and an error.
local function exchange(sock, tag)
	local ok, err = sock:send(tag .. "\n")
	if not ok then
		return nil, err
	end
	return sock:receive("*l")
end

-- flush closes the thread's idle connections.
local function flush()
	for i = nidle, 1, -1 do
		idle[i]:close()
		idle[i], idle_at[i] = nil, nil
	end
	nidle = 0
end

-- ask asks the daemon over a connection of the thread's pool, one
-- request at a time on each: "OK", "NO", or nil and an error.
--
-- An exchange that may have reached the daemon is never asked again: the
-- daemon would spend a second token. HAProxy's sockets say "connection
-- closed." alike for a connection the daemon closed and for one whose
-- answer did not come in time, so kept connections are kept from the
-- second case: each exchange starts with its timeout set anew, and a
-- connection idle for over half the timeout is closed rather than used
-- (with the stack's last in first out, all those under it are older), so
-- that HAProxy never times one out while it waits in the pool. Then a
-- kept connection that fails at once (before half the timeout) is one
-- the daemon closed before it read the line (a restart), and the tag is
-- asked once more on a new connection; one that fails later is not.
-- After a failure the thread's other idle connections are closed too.
local function ask(tag)
	local start = clock()
	local sock, kept
	if nidle > 0 then
		if start - idle_at[nidle] < timeout / 2 then
			sock, idle[nidle], idle_at[nidle], nidle = idle[nidle], nil, nil, nidle - 1
			sock:settimeout(timeout)
			kept = true
		else
			flush()
		end
	end
	for _ = 1, 2 do
		if not sock then
			sock = core.tcp()
			sock:settimeout(timeout)
			local ok, err = sock:connect(address)
			if not ok then
				sock:close()
				return nil, err
			end
		end
		local line, err = exchange(sock, tag)
		if line == "OK" or line == "NO" then
			if nidle < pool_size then
				nidle = nidle + 1
				idle[nidle], idle_at[nidle] = sock, start
			else
				sock:close()
			end
			return line
		end
		sock:close() -- a late answer must never answer a later request
		flush()
		if line ~= nil or not kept or clock() - start >= timeout / 2 then
			return nil, err or ("answer " .. fmt("%q", tostring(line)))
		end
		sock, kept = nil, false
	end
end

-- asked asks the daemon what the table could not decide. After a failed
-- ask, the thread asks nothing for a while, answering by the fail mode.
local function asked(txn, tag)
	if not dt.shared() then
		kick() -- not attached yet, or a daemon that shared nothing and may now
	end
	local now = clock()
	if now < ask_until then
		return fail(txn)
	end
	local line, err = ask(tag)
	if not line then
		if ask_backoff == 0 then
			core.Warning("dthrottle: cannot ask " .. path .. ", failing " .. fail_mode .. ": " .. tostring(err))
			ask_backoff = retry_min
		else
			ask_backoff = min(ask_backoff * 2, retry_max)
		end
		ask_until = now + ask_backoff
		kick()
		return fail(txn)
	end
	if ask_backoff ~= 0 then
		core.Info("dthrottle: asking " .. path .. " again")
		ask_backoff = 0
	end
	count("asked")
	if line == "NO" then
		count("asked_no")
		return refuse_guess(txn)
	end
	txn:set_var("txn.dthrottle", "OK")
end

-- bad answers a tag the line protocol cannot carry.
local function bad(txn)
	if not bad_logged then
		bad_logged = true
		core.Warning("dthrottle: a tag with CR or LF, or over " .. max_tag .. " bytes: " .. bad_tag)
	end
	if allow_bad then
		return txn:set_var("txn.dthrottle", "OK")
	end
	return refuse_guess(txn)
end

core.register_converters("dthrottle_decide", dt.decide)

core.register_action("dthrottle_resolve", { "http-req" }, function(txn)
	local what, tag, pol, retry, reset, stated, burst, rate = take()
	if what == "NO" then
		return refuse_table(txn, tag, pol, retry, reset, stated, burst, rate)
	elseif what == "ASK" then
		return asked(txn, tag)
	elseif what == "LEFT" then
		kick()
		return fail(txn)
	elseif what == "BAD" then
		return bad(txn)
	end
	-- Nothing left: the converter served, or had no tag to decide.
end, 0)

-- lua.dthrottle_stats: the process's counters in one line (decided in
-- process: ok and no; asked, of which asked_no refused; failed: answered
-- by the fail mode; bad tags; attaches; shared: deciding in process), e.g.
--   http-request return status 200 content-type text/plain lf-string "%[lua.dthrottle_stats]" if { path /dthrottle-stats } { src 127.0.0.1 }
core.register_fetches("dthrottle_stats", function()
	local s = dt.stats()
	return fmt("ok=%d no=%d asked=%d asked_no=%d failed=%d bad=%d attaches=%d shared=%s",
		s.ok, s.no, s.asked, s.asked_no, s.failed, s.bad, s.attaches, tostring(s.shared))
end)

-- The first attach, as the worker starts: each thread's state starts a
-- task; the first to claim attaches, the others end at once.
core.register_task(function()
	if dt.shared() or not dt.claim() then
		return
	end
	if dt.shared() then
		dt.release(true) -- attached by another thread in between
		return
	end
	attach_task()
end)
