-- wrk script for bench/seed002_container.sh: seed 002's traffic on mlapp
-- (examples/container/app), paced, 1 request in 20 to /gradcam (150 MiB held
-- for 2 s: the spike), the rest to /predict (20 MiB kept each: the leak).
--
--   wrk -t2 -c2 -d90s --timeout 10s --latency -s bench/seed002/mix.lua http://127.0.0.1:8000
--
-- One connection per wrk thread (-t N -cN): each connection then has a Lua
-- state of its own, which the pacing below needs. Environment, read by
-- each thread:
--   SEED002_DELAY_MS    pause before each request on a connection (default
--                       1000: about 1 request a second per connection);
--   SEED002_JITTER_MS   the pause varies by up to this either way (default
--                       250), from a fixed seed per connection, so that two
--                       runs send the same sequence;
--   SEED002_SPIKE_EVERY every Nth request of a connection goes to /gradcam
--                       (default 20); the connections' spikes are staggered;
--   SEED002_SEED        another schedule (default 2002): the pauses' random
--                       seed, and the spikes shifted by SEED - 2002 requests.
--
-- Every request carries "Connection: close": each has a connection of its
-- own, so that a worker closing its idle keep-alive connections as it leaves
-- is not counted as a failure. What wrk counts as a socket error is then a
-- request that failed: refused, reset (a worker killed under it), cut short,
-- or not answered within --timeout.
--
-- wrk 4.1 opens the next connection as soon as a response is in, and waits
-- the delay() on it. When the server closes that idle connection meanwhile (a
-- worker killed by the kernel), wrk reconnects and asks delay() again while
-- the first timer still runs: two timers, then two requests in a row on the
-- connection, and every such event adds a request chain (seen: the rate grew
-- from 2 to 5 requests a second over four OOM kills). So delay() keeps its
-- connection's state: a delay asked for while one is pending is the
-- duplicate, and gets a timer that outlasts the run; request() ends a wait.
--
-- Each /gradcam's send time and the time it was answered (or found failed:
-- the connection's next request) go out as "seed002_gradcam START_MS END_MS
-- ok|failed|open" lines (wall clock, ms: podman logs' timestamps are on the
-- same clock), and done() prints "seed002 KEY VALUE" lines.

local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } seed002_timespec;
int clock_gettime(int clk_id, seed002_timespec *tp);
]]
local timespec = ffi.new("seed002_timespec")

local function now_ms()
  ffi.C.clock_gettime(0, timespec) -- CLOCK_REALTIME
  return tonumber(timespec.tv_sec) * 1000 + math.floor(tonumber(timespec.tv_nsec) / 1e6)
end

local threads = {}
local started = 0

function setup(thread)
  started = started + 1
  thread:set("conn_id", started)
  table.insert(threads, thread)
end

local function env_number(name, default)
  local v = tonumber(os.getenv(name) or "")
  if v == nil then return default end
  return v
end

function init(args)
  delay_ms = env_number("SEED002_DELAY_MS", 1000)
  jitter_ms = env_number("SEED002_JITTER_MS", 250)
  spike_every = env_number("SEED002_SPIKE_EVERY", 20)
  seed = env_number("SEED002_SEED", 2002)
  conn_id = conn_id or 1
  math.randomseed(seed + conn_id)
  -- By default connection 1 spikes on its 10th, 30th, ... request,
  -- connection 2 on its 20th, 40th, ...: the two do not coincide.
  spike_phase = 0
  if spike_every > 0 then
    spike_phase = (math.floor(spike_every / 2 * conn_id) + seed - 2002) % spike_every
  end
  sent = 0
  sent_gradcam = 0
  ok_2xx = 0
  non2xx = 0
  parked = 0
  waiting = false
  gradcam_open = nil -- the send time of the /gradcam in flight
  gradcam_log = ""
  local headers = {["Connection"] = "close"}
  predict_req = wrk.format("GET", "/predict", headers)
  gradcam_req = wrk.format("GET", "/gradcam", headers)
end

local function gradcam_closed(how)
  gradcam_log = gradcam_log .. string.format("%.0f %.0f %s;", gradcam_open, now_ms(), how)
  gradcam_open = nil
end

function request()
  waiting = false
  -- A request while a /gradcam is open: that one failed (wrk retries at once).
  if gradcam_open then gradcam_closed("failed") end
  sent = sent + 1
  if spike_every > 0 and sent % spike_every == spike_phase then
    sent_gradcam = sent_gradcam + 1
    gradcam_open = now_ms()
    return gradcam_req
  end
  return predict_req
end

function delay()
  if waiting then
    -- wrk's duplicate timer (above): never fires within the run.
    parked = parked + 1
    return 24 * 3600 * 1000
  end
  waiting = true
  if jitter_ms <= 0 then return delay_ms end
  return delay_ms - jitter_ms + math.random(0, 2 * jitter_ms)
end

function response(status, headers, body)
  if gradcam_open then gradcam_closed(status >= 200 and status < 300 and "ok" or "failed") end
  if status >= 200 and status < 300 then
    ok_2xx = ok_2xx + 1
  else
    non2xx = non2xx + 1
  end
end

function done(summary, latency, requests)
  local sum = {sent = 0, sent_gradcam = 0, ok_2xx = 0, non2xx = 0, parked = 0}
  for _, t in ipairs(threads) do
    for k, _ in pairs(sum) do
      sum[k] = sum[k] + (t:get(k) or 0)
    end
  end
  for _, t in ipairs(threads) do
    local log = t:get("gradcam_log") or ""
    for entry in string.gmatch(log, "([^;]+);") do
      io.write("seed002_gradcam " .. entry .. "\n")
    end
    local open = t:get("gradcam_open")
    if open then io.write(string.format("seed002_gradcam %.0f 0 open\n", open)) end
  end
  local e = summary.errors
  local out = {
    {"requests", summary.requests},
    {"duration_us", summary.duration},
    {"sent", sum.sent},
    {"sent_gradcam", sum.sent_gradcam},
    {"ok_2xx", sum.ok_2xx},
    {"non2xx", sum.non2xx},
    {"parked_timers", sum.parked},
    {"err_connect", e.connect},
    {"err_read", e.read},
    {"err_write", e.write},
    {"err_timeout", e.timeout},
    {"err_status", e.status},
    {"p50_us", latency:percentile(50)},
    {"p90_us", latency:percentile(90)},
    {"p99_us", latency:percentile(99)},
    {"max_us", latency.max},
  }
  for _, kv in ipairs(out) do
    io.write(string.format("seed002 %s %d\n", kv[1], kv[2]))
  end
end
