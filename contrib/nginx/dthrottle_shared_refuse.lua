-- dthrottle_shared_refuse.lua: dthrottle_shared.lua's refusals and their
-- RateLimit-Policy, RateLimit and Retry-After, their values from
-- libdthrottle's dt_headers (the daemon's arithmetic) through the FFI.
-- Install it beside dthrottle_shared.lua.
local ffi = require "ffi"

local min, find = math.min, string.find
local ffi_string, ffi_copy = ffi.string, ffi.copy

local _M = {}

-- new returns refuse_table(tbl, p, n, tag, r) and refuse_guess(), which
-- end the request with the refusal, for the options cfg (status, policy,
-- pnames, rate, burst) and the library lib (dthrottle_shared.lua's).
function _M.new(cfg, lib)
    local info = ffi.new("dt_policy_info")
    local hv = ffi.new("dt_header_values")

    -- headers returns the values of RateLimit-Policy, RateLimit and
    -- Retry-After of a refusal (dt_headers) under info, named name, or
    -- Retry-After alone without a name.
    local function headers(name, wait, full)
        if name then
            local k = min(#name, 255)
            ffi_copy(info.name, name, k)
            info.name[k] = 0
        end
        lib.dt_headers(name and info or nil, 0, 0, wait, full, hv)
        local retry = ffi_string(hv.retry_after, hv.retry_after_len)
        if not name then
            return nil, nil, retry
        end
        return ffi_string(hv.policy, hv.policy_len), ffi_string(hv.limit, hv.limit_len), retry
    end

    -- refuse ends the request with the refusal, its headers those given.
    local function refuse(retry, policy, limit)
        local h = ngx.header
        h["Retry-After"] = retry
        h["RateLimit-Policy"] = policy
        h["RateLimit"] = limit
        h["Content-Type"] = "text/plain"
        ngx.status = cfg.status
        ngx.print("Too Many Requests\n")
        return ngx.exit(cfg.status)
    end

    -- policy_name is the name of tag's policy found by its prefix in names,
    -- or nil.
    local function policy_name(tag)
        for _, p in ipairs(cfg.pnames) do
            if find(tag, p[1], 1, true) == 1 then
                return p[2]
            end
        end
    end

    -- refuse_table refuses the tag of n bytes at p (tag, when a string),
    -- decided from tbl, with the headers of the bucket that refused: r,
    -- the dt_result of a limit policy (a deny policy has no bucket, and
    -- gets no RateLimit headers, as from the daemon's HTTP endpoint). The
    -- policy is the table's (none while the daemon rewrites its policies:
    -- Retry-After alone), its name the one names gives, else policy's for
    -- the default (or a table that names none), else the table's.
    local function refuse_table(tbl, p, n, tag, r)
        if r.reset_ns <= 0 then
            return refuse(nil, nil, nil)
        end
        local name
        if lib.dt_policy(tbl, r.policy, info) == 0 then
            name = ffi_string(info.name)
            if r.policy == 0 or name == tostring(r.policy) then
                name = cfg.policy -- a table without names states the index
            end
            if r.policy > 0 and cfg.pnames[1] then
                name = policy_name(tag or ffi_string(p, n)) or name
            end
        end
        local pol, limit, retry = headers(name, r.retry_after_ns, r.reset_ns)
        return refuse(retry, pol, limit)
    end

    -- The headers of a refusal the table did not decide: an empty bucket, a
    -- token in 1 / rate seconds, full in burst / rate.
    ffi.fill(info, ffi.sizeof(info))
    info.burst, info.rate = cfg.burst, cfg.rate
    local h_policy, h_limit, h_retry = headers(cfg.policy,
        min(1e9 / cfg.rate, 2 ^ 62), min(cfg.burst / cfg.rate * 1e9, 2 ^ 62))

    -- refuse_guess refuses with the headers of rate and burst.
    local function refuse_guess()
        return refuse(h_retry, h_policy, h_limit)
    end

    return refuse_table, refuse_guess
end

return _M
