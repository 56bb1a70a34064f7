-- dthrottle_shared_socket.lua: dthrottle_shared.lua's line protocol to
-- dthrottled over nginx's nonblocking cosockets (ngx.socket.tcp): a probe
-- before attaching, and the asks of the tags the table does not decide,
-- on connections from a per-worker keep-alive pool. Install it beside
-- dthrottle_shared.lua.
local ffi = require "ffi"

pcall(ffi.cdef, "char *strerror(int errnum);")
pcall(ffi.cdef, "int access(const char *path, int mode);")

local tcp, fmt = ngx.socket.tcp, string.format

local _M = {}

-- errstr says what errno holds.
function _M.errstr()
    local e = ffi.errno()
    return ffi.string(ffi.C.strerror(e)) .. " (errno " .. e .. ")"
end

-- new returns the probe and ask of the daemon that cfg names (path, url,
-- timeout, idle, pool_size).
function _M.new(cfg)
    local errstr = _M.errstr

    -- probe asks the daemon an empty line over a cosocket: true when it
    -- answers within timeout, so that attaching will not block for long.
    local function probe()
        -- A daemon that stopped cleanly removed its socket: say so without a
        -- connect, which nginx would log at "crit".
        if ffi.C.access(cfg.path, 0) ~= 0 then
            return false, "no socket: " .. errstr()
        end
        local sock = tcp()
        local t = cfg.timeout
        sock:settimeouts(t, t, t)
        local ok, err = sock:connect(cfg.url)
        if not ok then
            return false, err
        end
        ok, err = sock:send("\n")
        local line
        if ok then
            line, err = sock:receive("*l")
        end
        sock:close()
        if line ~= "OK" then
            return false, "probe: " .. tostring(line or err)
        end
        return true
    end

    -- exchange asks tag on sock: true (OK), false (NO), or nil and an error.
    local function exchange(sock, line)
        local ok, err = sock:send(line)
        if not ok then
            return nil, err
        end
        local answer
        answer, err = sock:receive("*l")
        if answer == "OK" then
            return true
        elseif answer == "NO" then
            return false
        end
        return nil, answer and "answer " .. fmt("%q", answer) or err
    end

    -- ask asks the daemon over a pooled cosocket: true (OK), false (NO), or
    -- nil and an error.
    local function ask(tag)
        local line = tag .. "\n"
        local t = cfg.timeout
        for _ = 1, 2 do
            local sock = tcp()
            sock:settimeouts(t, t, t)
            local ok, err = sock:connect(cfg.url)
            if not ok then
                return nil, err
            end
            local kept = sock:getreusedtimes() > 0
            ok, err = exchange(sock, line)
            if ok ~= nil then
                sock:setkeepalive(cfg.idle, cfg.pool_size)
                return ok
            end
            sock:close()
            -- A kept connection the daemon closed while it was idle (a
            -- restart): nothing was answered, so ask once on a new one.
            if not (kept and (err == "closed" or err == "broken pipe" or err == "connection reset by peer")) then
                return nil, err
            end
        end
        return nil, "closed"
    end

    return probe, ask
end

return _M
