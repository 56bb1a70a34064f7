-- dthrottle.lua: nginx (lua-nginx-module) asks dthrottled once per request
-- over its line protocol ("tag\n" -> "OK\n" or "NO\n") on the Unix socket,
-- through a per-worker keep-alive pool of cosocket connections.
--
-- In the http block:
--   lua_package_path "/etc/nginx/dthrottle/?.lua;;";
--   init_by_lua_block {
--       require("dthrottle").configure{
--           socket = "unix:/run/dthrottle/dthrottle.sock",
--           rate = 1, burst = 20,   -- the daemon's policy, for the headers
--       }
--   }
-- In a server or location:
--   access_by_lua_block { require("dthrottle").access(ngx.var.remote_addr) }
--
-- A refusal ends the request with 429 and Retry-After, RateLimit-Policy and
-- RateLimit headers computed here from rate and burst: the line protocol
-- answers only OK or NO, so they are approximate (Retry-After is the time
-- one token takes to drip back, at least 1 s). A daemon that does not answer
-- within the timeout, or cannot be reached, lets the request through (fail
-- open) and is logged at most once every 10 s per worker.
local _M = {}

local cfg = {
    socket = "unix:/run/dthrottle/dthrottle.sock",
    timeout = 50,       -- ms, connect, send and receive each
    pool_size = 64,     -- idle connections kept per worker
    idle = 60000,       -- ms an idle connection stays in the pool
    prefix = "",        -- put before every tag (a [[policy]] prefix)
    policy = "default", -- the policy's name in the RateLimit headers
    rate = 1,
    burst = 1,
    status = 429,
    fail = "open",      -- "closed" refuses while the daemon is unreachable
}

local ceil = math.ceil
local last_log = 0

-- configure sets options (see cfg above) and precomputes the headers.
function _M.configure(opts)
    for k, v in pairs(opts or {}) do
        if cfg[k] == nil then
            error("dthrottle: unknown option " .. tostring(k))
        end
        cfg[k] = v
    end
    if not (cfg.rate > 0 and cfg.burst >= 1) then
        error("dthrottle: rate must be > 0 and burst >= 1")
    end
    local window = ceil(cfg.burst / cfg.rate)
    cfg.h_policy = string.format('"%s";q=%d;w=%d', cfg.policy, cfg.burst, window)
    cfg.h_limit = string.format('"%s";r=0;t=%d', cfg.policy, window)
    cfg.h_retry = tostring(math.max(1, ceil(1 / cfg.rate)))
end
_M.configure()

local function unreachable(err)
    local now = ngx.now()
    if now - last_log >= 10 then
        last_log = now
        ngx.log(ngx.ERR, "dthrottle: daemon unreachable, failing ", cfg.fail, ": ", cfg.socket, ": ", err)
    end
    return cfg.fail == "open"
end

-- ask returns true when the tag may be served.
function _M.ask(tag)
    local sock = ngx.socket.tcp()
    sock:settimeouts(cfg.timeout, cfg.timeout, cfg.timeout)
    local ok, err = sock:connect(cfg.socket)
    if not ok then
        return unreachable(err)
    end
    -- A tag may not hold a newline; cut it at the first one.
    tag = cfg.prefix .. (tag:match("^[^\n]*") or "")
    ok, err = sock:send(tag .. "\n")
    if not ok then
        sock:close()
        return unreachable(err)
    end
    local line
    line, err = sock:receive("*l")
    if not line then
        sock:close()
        return unreachable(err)
    end
    sock:setkeepalive(cfg.idle, cfg.pool_size)
    return line ~= "NO"
end

-- access asks for tag and ends the request with the refusal when refused.
function _M.access(tag)
    if _M.ask(tag) then
        return
    end
    local h = ngx.header
    h["Retry-After"] = cfg.h_retry
    h["RateLimit-Policy"] = cfg.h_policy
    h["RateLimit"] = cfg.h_limit
    ngx.status = cfg.status
    ngx.header["Content-Type"] = "text/plain"
    ngx.say("Too Many Requests")
    return ngx.exit(cfg.status)
end

return _M
