-- dthrottle_shared.lua: OpenResty (or nginx with lua-nginx-module,
-- Debian's libnginx-mod-http-lua) decides dthrottled's queries in each
-- worker, from the table the daemon shares over its Unix socket
-- (docs/shared-table.md), through LuaJIT's FFI and libdthrottle
-- (libdthrottle). A tag the table holds costs a hash, a probe
-- and one compare-and-swap in the worker's own address space: no system
-- call, no lock, nothing sent.
--
-- In the http block (see dthrottle-shared.conf; docs/integrations/openresty.md
-- says all), with dthrottle_shared_socket.lua beside this file:
--   lua_package_path "/etc/nginx/dthrottle/?.lua;;";
--   init_by_lua_block {
--       require("dthrottle_shared").configure{
--           library = "/usr/local/lib/libdthrottle.so",
--           socket = "/run/dthrottle/dthrottle.sock",
--       }
--   }
--   init_worker_by_lua_block { require("dthrottle_shared").init_worker() }
-- In a server or location, the client's address as the tag:
--   access_by_lua_block {
--       require("dthrottle_shared").access_var("remote_addr")
--   }
-- access_var(name) decides for the nginx variable $name read in place;
-- access(tag) for any string, at more cost (a Lua string made of it).
--
-- Each worker attaches once (dt_open, in init_worker) and keeps its
-- attachment; each request's tag goes to dt_decide:
--   DT_OK   the request goes on;
--   DT_NO   429 (status), Retry-After, RateLimit-Policy and RateLimit for
--           the bucket that refused, from libdthrottle's dt_headers;
--   DT_ASK  a tag the table does not hold yet, or a daemon that shares
--           nothing: asked over the line protocol (dthrottle_shared_socket);
--           unanswered within timeout, the fail mode answers, and the
--           worker asks nothing for a while (retry_min doubling to retry_max);
--   DT_LEFT the daemon stopped or stalled: the fail mode answers, and a
--           timer attaches again once the daemon answers a probe.
-- A refusal the table did not decide (asked, fail closed, a bad tag) gets
-- the headers of an empty bucket of rate and burst (approximate). A tag
-- with CR or LF, or over max_tag bytes, is refused (bad_tag = "allow"
-- serves it) and logged once per worker; an empty tag is served.
--
-- Attaching blocks for one exchange on the local socket (tens of
-- microseconds): once per worker before it serves, then only from a timer
-- after a probe answered within timeout. Whoever may connect to the
-- daemon's socket may decide; the workers map the state file writable.
local ffi = require "ffi"

local _M = {}

if not pcall(ffi.typeof, "dt_result") then
    ffi.cdef [[
typedef struct dt_table dt_table;
typedef struct {
    int policy; uint32_t limit; int64_t remaining, retry_after_ns, reset_ns;
} dt_result;
int dt_open(const char *socket_path, dt_table **out);
typedef struct {
    char name[256]; int action, dry_run; uint32_t burst; double rate;
} dt_policy_info;
typedef struct {
    char policy[576], limit[576], retry_after[24];
    size_t policy_len, limit_len, retry_after_len;
} dt_header_values;
int dt_decide(dt_table *t, const char *tag, size_t n, int64_t now, dt_result *res);
int dt_policy(dt_table *t, int policy, dt_policy_info *out);
void dt_headers(const dt_policy_info *p, int served, double tokens,
                int64_t wait_ns, int64_t full_ns, dt_header_values *h);
int dt_reattach(dt_table *t);
int dt_shared(const dt_table *t);
void dt_close(dt_table *t);
int64_t dt_now(void);
]]
end
-- libc's, which another module may have declared already.
pcall(ffi.cdef, "void *memchr(const void *s, int c, size_t n);")

local cfg = {
    library = "/usr/local/lib/libdthrottle.so",
    socket = "/run/dthrottle/dthrottle.sock",
    timeout = 50,       -- ms: connect, send and receive of an ask or a probe
    pool_size = 64,     -- idle connections kept per worker for asking
    idle = 60000,       -- ms an idle connection stays in the pool
    prefix = "",        -- put before every tag (a [[policy]] prefix)
    policy = "default", -- the default policy's name in the RateLimit headers
    names = {},         -- { ["prefix"] = "name" }: the [[policy]] names
    rate = 1,           -- the policy's rate and burst, for the headers of
    burst = 10,         --   refusals the table did not decide
    status = 429,       -- the status of a refusal
    fail = "open",      -- "closed" refuses while dthrottled is away
    bad_tag = "deny",   -- or "allow": a tag with CR or LF, or over max_tag
    max_tag = 1024,     -- bytes, prefix included
    retry_min = 50,     -- ms, the first pause after a failed attach
    retry_max = 5000,   -- ms, the longest
    recheck = 10,       -- s: a daemon that shared nothing is attached again
    stats_dict = nil,   -- a lua_shared_dict the workers add their counts to
}

local min, find = math.min, string.find
local log, ERR, WARN, NOTICE = ngx.log, ngx.ERR, ngx.WARN, ngx.NOTICE
local ngx_now, is_internal = ngx.now, ngx.req.is_internal
local C, ffi_string, ffi_copy = ffi.C, ffi.string, ffi.copy
local lib            -- the library, once configured
local sock = require("dthrottle_shared_socket")
local errstr = sock.errstr
local probe, ask     -- sock's, once configured
local refusal = require("dthrottle_shared_refuse")
local refuse_table, refuse_guess -- refusal's, once configured

-- The nginx variable read in place, as lua-resty-core's ngx.var does, but
-- without making a Lua string of its value, nor calling through the
-- interpreter: access_var's whole path is compiled (see access_var).
local get_request, var_get
local var_value = ffi.new("char *[1]")
local var_len = ffi.new("size_t[1]")
local var_err = ffi.new("char *[1]")
local var_low = ffi.new("char[64]") -- the name, lower-cased
local tag_buf                       -- prefix .. value, max_tag bytes

-- configure sets options (see cfg above), loads the library and
-- precomputes what it can. It runs in init_by_lua (the master process).
function _M.configure(opts)
    for k, v in pairs(opts or {}) do
        if k ~= "stats_dict" and cfg[k] == nil then
            error("dthrottle_shared: unknown option " .. tostring(k))
        end
        cfg[k] = v
    end
    if not (cfg.rate > 0 and cfg.burst >= 1 and cfg.timeout > 0) then
        error("dthrottle_shared: rate and timeout must be > 0, burst >= 1")
    end
    if cfg.fail ~= "open" and cfg.fail ~= "closed" then
        error('dthrottle_shared: fail must be "open" or "closed"')
    end
    if cfg.bad_tag ~= "deny" and cfg.bad_tag ~= "allow" then
        error('dthrottle_shared: bad_tag must be "deny" or "allow"')
    end
    if not (cfg.retry_min > 0 and cfg.retry_max >= cfg.retry_min) then
        error("dthrottle_shared: retry_min must be > 0 and retry_max >= retry_min")
    end
    if not (cfg.max_tag >= 1 and cfg.max_tag <= 65536) then
        error("dthrottle_shared: max_tag must be 1 to 65536")
    end
    local path = cfg.socket:gsub("^unix:", "")
    if path:sub(1, 1) ~= "/" then
        -- nginx's cosockets reach no abstract socket ("@name").
        error("dthrottle_shared: socket must be an absolute path: " .. cfg.socket)
    end
    cfg.path, cfg.url = path, "unix:" .. path
    probe, ask = sock.new(cfg)
    -- The [[policy]] names by prefix, longest first as the daemon
    -- matches them.
    local names = {}
    for prefix, n in pairs(cfg.names) do
        names[#names + 1] = { prefix, n }
    end
    table.sort(names, function(a, b)
        return #a[1] > #b[1] or (#a[1] == #b[1] and a[1] < b[1])
    end)
    cfg.pnames = names
    cfg.open = cfg.fail == "open"
    cfg.allow_bad = cfg.bad_tag == "allow"
    if opts ~= nil then
        local ok, l = pcall(ffi.load, cfg.library)
        if not ok then
            error("dthrottle_shared: cannot load " .. cfg.library .. ": " .. tostring(l))
        end
        lib = l
        tag_buf = ffi.new("char[?]", cfg.max_tag + 1)
        refuse_table, refuse_guess = refusal.new(cfg, lib)
        -- lua-resty-core's request and variable entries, when there:
        -- access_var reads variables through ngx.var otherwise.
        ok = pcall(function()
            get_request = require("resty.core.base").get_request
            var_get = C.ngx_http_lua_ffi_var_get
        end)
        if not ok or type(get_request) ~= "function" then
            get_request, var_get = nil, nil
        end
    end
end
_M.configure()

-- Per worker: the attachment, the result reused by every decision, and
-- the state of attaching again.
local tbl            -- dt_table * (closed by the GC), nil while detached
local shared = false -- tbl decides in process (else it asks everything)
local res = ffi.new("dt_result")
local attaching = false         -- a timer is attaching
local next_try = 0              -- ngx.now() before which nobody attaches
local backoff = 0               -- ms, 0 while attached
local down = false              -- the outage was logged
local ask_until, ask_backoff = 0, 0    -- no asking before ask_until
local bad_logged = false

-- Counters, per worker (_M.stats; stats_dict adds them up).
local n_ok, n_no, n_asked, n_asked_no, n_failed, n_bad, n_attaches = 0, 0, 0, 0, 0, 0, 0


-- attach makes or renews the worker's attachment, blocking for one
-- exchange on the local socket. It returns true, or false and an error.
local function attach()
    if tbl == nil then
        local out = ffi.new("dt_table *[1]")
        if lib.dt_open(cfg.path, out) ~= 0 then
            return false, "dt_open " .. cfg.path .. ": " .. errstr()
        end
        tbl = ffi.gc(out[0], lib.dt_close)
    elseif lib.dt_reattach(tbl) ~= 0 then
        return false, "dt_reattach " .. cfg.path .. ": " .. errstr()
    end
    shared = lib.dt_shared(tbl) == 1
    n_attaches = n_attaches + 1
    return true
end

-- attached records an attach's outcome: the backoff, the next attempt,
-- and the log lines of an outage and a recovery.
local function attached(ok, err)
    if ok then
        if down then
            log(NOTICE, "dthrottle: attached again to ", cfg.path, shared and "" or " (the daemon shares no table: asking)")
            down = false
        end
        backoff = 0
        -- A daemon that shared nothing may share after a restart.
        next_try = shared and 0 or ngx_now() + cfg.recheck
        return
    end
    if not down then
        log(ERR, "dthrottle: detached, failing ", cfg.fail, ": ", err)
        down = true
    end
    backoff = backoff == 0 and cfg.retry_min or min(backoff * 2, cfg.retry_max)
    next_try = ngx_now() + backoff / 1000
end

local function reattach(premature)
    if not premature then
        local pok, ok, err = pcall(probe)
        if pok and ok then
            pok, ok, err = pcall(attach)
        elseif pok then
            err = cfg.url .. ": " .. err
        end
        if not pok then
            ok, err = false, ok -- the error raised
        end
        attached(ok, err)
    end
    attaching = false
end

-- kick attaches again from a timer, unless one is on its way or the
-- backoff holds.
local function kick()
    if attaching or ngx_now() < next_try then
        return
    end
    local ok, err = ngx.timer.at(0, reattach)
    if not ok then
        attached(false, "cannot start a timer to attach: " .. tostring(err))
        return
    end
    attaching = true
end

-- fail answers by the fail mode.
local function fail()
    n_failed = n_failed + 1
    if cfg.open then
        return
    end
    return refuse_guess()
end

-- asked asks the daemon what the table could not decide. After a failed
-- ask, the worker asks nothing for a while (retry_min doubling up to
-- retry_max), answering by the fail mode at once.
local function asked(tag)
    if not shared then
        kick() -- a daemon that shared nothing may share since a restart
    end
    local now = ngx_now()
    if now < ask_until then
        return fail()
    end
    local ok, err = ask(tag)
    if ok == nil then
        if ask_backoff == 0 then
            log(ERR, "dthrottle: cannot ask, failing ", cfg.fail, ": ", cfg.url, ": ", err)
            ask_backoff = cfg.retry_min
        else
            ask_backoff = min(ask_backoff * 2, cfg.retry_max)
        end
        ask_until = now + ask_backoff / 1000
        kick()
        return fail()
    end
    if ask_backoff ~= 0 then
        log(NOTICE, "dthrottle: asking again: ", cfg.url)
        ask_backoff = 0
    end
    n_asked = n_asked + 1
    if ok then
        return
    end
    n_asked_no = n_asked_no + 1
    return refuse_guess()
end

-- bad answers a tag the line protocol cannot carry.
local function bad()
    n_bad = n_bad + 1
    if not bad_logged then
        bad_logged = true
        log(WARN, "dthrottle: a tag with CR or LF, or over ", cfg.max_tag, " bytes: ", cfg.bad_tag)
    end
    if cfg.allow_bad then
        return
    end
    return refuse_guess()
end

-- decide decides for the n bytes at p: tag itself, or a char * when tag
-- is nil (a Lua string is made of it only to ask, or to name a policy).
local function decide(p, n, tag)
    local t = tbl
    if t == nil then
        kick()
        return fail()
    end
    local rc = lib.dt_decide(t, p, n, lib.dt_now(), res)
    if rc == 1 then -- DT_OK
        n_ok = n_ok + 1
        return
    elseif rc == 0 then -- DT_NO
        n_no = n_no + 1
        return refuse_table(tbl, p, n, tag, res)
    elseif rc == 3 then -- DT_LEFT
        kick()
        return fail()
    end
    return asked(tag or ffi_string(p, n)) -- DT_ASK
end

-- access decides for tag (a string; nil or empty is served) and ends the
-- request with the refusal when refused.
function _M.access(tag)
    if tag == nil or tag == "" or is_internal() then
        return
    end
    local prefix = cfg.prefix
    if prefix ~= "" then
        tag = prefix .. tag
    end
    local n = #tag
    if n > cfg.max_tag or find(tag, "\n", 1, true) or find(tag, "\r", 1, true) then
        return bad()
    end
    return decide(tag, n, tag)
end

-- access_var decides for the value of the nginx variable name ("$name"
-- without the "$"; not found or empty is served), as access(ngx.var[name])
-- does, at less cost per request.
function _M.access_var(name)
    if is_internal() then
        return
    end
    local nlen = #name
    if var_get == nil or nlen > 64 then
        return _M.access(ngx.var[name])
    end
    local r = get_request()
    if r == nil then
        error("no request found")
    end
    local rc = var_get(r, name, nlen, var_low, 0, var_value, var_len, var_err)
    if rc ~= 0 then
        if rc == -5 then -- NGX_DECLINED: not found
            return
        end
        error(ffi_string(var_err[0]))
    end
    local p, n = var_value[0], tonumber(var_len[0])
    if n == 0 then
        return
    end
    local prefix = cfg.prefix
    local plen = #prefix
    if plen + n > cfg.max_tag then
        return bad()
    end
    if plen > 0 then
        ffi_copy(tag_buf, prefix, plen)
        ffi_copy(tag_buf + plen, p, n)
        p, n = tag_buf, plen + n
    end
    if C.memchr(p, 10, n) ~= nil or C.memchr(p, 13, n) ~= nil then
        return bad()
    end
    return decide(p, n, nil)
end

-- stats returns this worker's counters: decided in process (ok, no),
-- asked (asked, of which asked_no refused), failed (answered by the fail
-- mode), bad (bad tags), attaches, and whether the worker is attached and
-- deciding in process (shared).
function _M.stats()
    return {
        ok = n_ok, no = n_no, asked = n_asked, asked_no = n_asked_no,
        failed = n_failed, bad = n_bad, attaches = n_attaches,
        attached = tbl ~= nil and not down, shared = shared,
    }
end

-- flush adds the counters since the last flush to stats_dict.
local flushed = {}
local function flush(premature)
    local dict = ngx.shared[cfg.stats_dict]
    if not dict then
        return
    end
    for k, v in pairs(_M.stats()) do
        if type(v) == "number" then
            local d = v - (flushed[k] or 0)
            if d ~= 0 then
                dict:incr(k, d, 0)
                flushed[k] = v
            end
        end
    end
end

-- init_worker attaches this worker (init_worker_by_lua). A daemon that
-- cannot be reached now is attached later, from the first request on.
function _M.init_worker()
    if lib == nil then
        error("dthrottle_shared: configure{} was not called in init_by_lua")
    end
    local typ = require("ngx.process").type()
    if typ ~= "worker" and typ ~= "single" then
        return
    end
    attached(attach())
    if cfg.stats_dict then
        if not ngx.shared[cfg.stats_dict] then
            log(ERR, "dthrottle: no lua_shared_dict ", cfg.stats_dict)
        else
            ngx.timer.every(1, flush)
        end
    end
end

return _M
