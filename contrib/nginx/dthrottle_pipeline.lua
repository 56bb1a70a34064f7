-- dthrottle_pipeline.lua: nginx (lua-nginx-module, Debian's
-- libnginx-mod-http-lua) asks dthrottled once per request over its line
-- protocol ("tag\n" -> "OK\n" or "NO\n"), with every request of a worker
-- sharing one connection to the Unix socket: the questions of the requests
-- that arrive while one batch is on its way are sent together, in one
-- write, and their answers read together. Every request still asks for
-- itself and gets its own answer, in order (the protocol's pipelining);
-- only the system calls and the daemon's wake-ups are shared.
--
-- In the http block (see dthrottle-pipeline.conf):
--   lua_package_path "/etc/nginx/dthrottle/?.lua;;";
--   init_by_lua_block {
--       require("dthrottle_pipeline").configure{
--           socket = "unix:/run/dthrottle/dthrottle.sock",
--           rate = 1, burst = 10,  -- the daemon's policy, for the headers
--       }
--   }
-- In a server or location:
--   access_by_lua_block {
--       require("dthrottle_pipeline").access(ngx.var.remote_addr)
--   }
--
-- A refusal ends the request with 429 (status) and Retry-After,
-- RateLimit-Policy and RateLimit headers computed here from rate, burst and
-- policy: the line protocol answers only OK or NO, so they are
-- approximate (Retry-After is one token's time, at least 1 s; RateLimit
-- says no token is left and the bucket is full again after burst/rate).
--
-- Failures: a batch not answered within timeout, a daemon that cannot be
-- reached or answers nonsense, fails open (fail = "closed" refuses): the
-- connection is closed, so a late answer can never answer a later request,
-- and the worker backs off, asking nothing and answering by the fail mode
-- at once, for backoff_min doubling up to backoff_max, then asks again.
-- The outage and the recovery are logged once each per worker. A tag
-- holding CR or LF, or longer than max_tag, is never sent (it would put
-- the answers out of step): refused (bad_tag = "allow" serves it), logged
-- once per worker. An empty tag is served unasked, as the daemon would.
local semaphore = require "ngx.semaphore"

local _M = {}

local cfg = {
    socket = "unix:/run/dthrottle/dthrottle.sock",
    timeout = 20,       -- ms: connect, send, and each answer read
    prefix = "",        -- put before every tag (a [[policy]] prefix)
    policy = "default", -- the policy's name in the RateLimit headers
    rate = 1,           -- the policy's rate and burst, for the headers
    burst = 10,
    status = 429,       -- the status of a refusal
    fail = "open",      -- "closed" refuses while dthrottled does not answer
    bad_tag = "deny",   -- or "allow": a tag that cannot be sent
    max_tag = 1024,     -- bytes, prefix included
    backoff_min = 10,   -- ms, the first pause after a failure
    backoff_max = 2000, -- ms, the longest
}

local concat, find, byte, now, log = table.concat, string.find, string.byte, ngx.now, ngx.log

-- configure sets options (see cfg above) and precomputes the headers.
function _M.configure(opts)
    for k, v in pairs(opts or {}) do
        if cfg[k] == nil then
            error("dthrottle_pipeline: unknown option " .. tostring(k))
        end
        cfg[k] = v
    end
    if not (cfg.rate > 0 and cfg.burst >= 1 and cfg.timeout > 0) then
        error("dthrottle_pipeline: rate and timeout must be > 0, burst >= 1")
    end
    if cfg.fail ~= "open" and cfg.fail ~= "closed" then
        error("dthrottle_pipeline: fail must be \"open\" or \"closed\"")
    end
    local window = math.ceil(cfg.burst / cfg.rate)
    cfg.h_policy = string.format('"%s";q=%d;w=%d', cfg.policy, cfg.burst, window)
    cfg.h_limit = string.format('"%s";r=0;t=%d', cfg.policy, window)
    cfg.h_retry = tostring(math.max(1, math.ceil(1 / cfg.rate)))
end
_M.configure()

-- Per worker: the batch being filled, the sender's wake-up, the backoff.
local function new_batch()
    return { n = 0, tags = {}, answers = {}, done = semaphore.new() }
end
local batch = new_batch()
local wake = semaphore.new()
local sending = false
local down_until, backoff = 0, 0
local bad_logged = false

-- finish wakes every request of batch b; unanswered ones use the fail mode.
local function finish(b)
    b.done:post(b.n)
end

-- failed starts or extends the backoff and logs the outage once.
local function failed(err)
    if backoff == 0 then
        log(ngx.ERR, "dthrottle: daemon unreachable, failing ", cfg.fail, ": ", cfg.socket, ": ", err)
        backoff = cfg.backoff_min
    else
        backoff = math.min(backoff * 2, cfg.backoff_max)
    end
    down_until = now() + backoff / 1000
end

-- exchange sends batch b on sock and reads its answers. It returns how
-- many were answered and an error, if any.
local function exchange(sock, b)
    local ok, err = sock:send(concat(b.tags, "\n", 1, b.n) .. "\n")
    if not ok then
        return 0, err
    end
    -- Every answer is exactly three bytes: read the batch's at once.
    local data, rerr, partial = sock:receive(3 * b.n)
    data = data or partial or ""
    local answers = b.answers
    for i = 1, b.n do
        local j = 3 * i - 2
        local x, y, nl = byte(data, j, j + 2)
        if x == 79 and y == 75 and nl == 10 then     -- "OK\n"
            answers[i] = true
        elseif x == 78 and y == 79 and nl == 10 then -- "NO\n"
            answers[i] = false
        elseif j > #data then
            return i - 1, rerr or "short answer"
        else
            return i - 1, "answer " .. string.format("%q", data:sub(j, j + 2))
        end
    end
    return b.n
end

-- connect opens a connection to the daemon.
local function connect()
    local sock = ngx.socket.tcp()
    local t = cfg.timeout
    sock:settimeouts(t, t, t)
    local ok, err = sock:connect(cfg.socket)
    if not ok then
        return nil, err
    end
    return sock
end

-- flush sends batch b on sock (a kept connection, or nil) and returns the
-- connection to keep, or nil after a failure.
local function flush(sock, b)
    local fresh = false
    if not sock then
        local err
        sock, err = connect()
        if not sock then
            failed(err)
            return nil
        end
        fresh = true
    end
    local answered, err = exchange(sock, b)
    if err and answered == 0 and not fresh
        and (err == "closed" or err == "broken pipe" or err == "connection reset by peer") then
        -- A kept connection the daemon closed while it was idle (a
        -- restart): nothing was answered, so ask again on a new one.
        sock:close()
        sock, err = connect()
        if not sock then
            failed(err)
            return nil
        end
        answered, err = exchange(sock, b)
    end
    if err then
        sock:close()
        failed(err)
        return nil
    end
    if backoff ~= 0 then
        log(ngx.NOTICE, "dthrottle: daemon answering again: ", cfg.socket)
        backoff = 0
    end
    return sock
end

-- sender is the worker's one light thread that talks to the daemon: it
-- waits for a batch, takes it, and sends it while the next one fills.
local function loop()
    local sock
    while not ngx.worker.exiting() do
        if batch.n == 0 then
            wake:wait(1)
        end
        local b = batch
        if b.n > 0 then
            batch = new_batch()
            if now() < down_until then
                finish(b)
            else
                sock = flush(sock, b)
                finish(b)
            end
        end
    end
    if sock then
        sock:close()
    end
end

local function sender(premature)
    if not premature then
        local ok, err = pcall(loop)
        if not ok then
            log(ngx.ERR, "dthrottle: sender stopped: ", err)
        end
    end
    sending = false
end

-- allow asks for tag and returns true when the request may be served.
function _M.allow(tag)
    if tag == nil or tag == "" then
        return true
    end
    if cfg.prefix ~= "" then
        tag = cfg.prefix .. tag
    end
    if #tag > cfg.max_tag or find(tag, "\n", 1, true) or find(tag, "\r", 1, true) then
        if not bad_logged then
            bad_logged = true
            log(ngx.WARN, "dthrottle: a tag with CR or LF, or over ", cfg.max_tag, " bytes, not sent: ", cfg.bad_tag)
        end
        return cfg.bad_tag == "allow"
    end
    if now() < down_until then
        return cfg.fail == "open"
    end
    if not sending then
        local ok, err = ngx.timer.at(0, sender)
        if not ok then
            log(ngx.ERR, "dthrottle: cannot start the sender: ", err)
            return cfg.fail == "open"
        end
        sending = true
    end
    local b = batch
    local i = b.n + 1
    b.n, b.tags[i] = i, tag
    if i == 1 then
        wake:post(1)
    end
    -- The batch before this one may still be on its way: wait for both.
    local ok = b.done:wait(cfg.timeout * 4 / 1000 + 0.01)
    local answer = b.answers[i]
    if not ok or answer == nil then
        return cfg.fail == "open"
    end
    return answer
end

-- access asks for tag and ends the request with the refusal when refused.
function _M.access(tag)
    if _M.allow(tag) then
        return
    end
    local h = ngx.header
    h["Retry-After"] = cfg.h_retry
    h["RateLimit-Policy"] = cfg.h_policy
    h["RateLimit"] = cfg.h_limit
    h["Content-Type"] = "text/plain"
    ngx.status = cfg.status
    ngx.print("Too Many Requests\n")
    return ngx.exit(cfg.status)
end

return _M
