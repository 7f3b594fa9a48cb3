-- wrk script of `hack/bench.sh fleet` (issue 15): the calls upstream's operators make, in their
-- proportion, at full speed. Per node and 15 s: one `nodes` report, one `gpu-devices` report per
-- card, GET /internal/nodes/cordoned and /decommissioning; per running session and 60 s one
-- Heartbeat status report. Bodies as upstream's operator builds them (tests/it/replay.rs).
--
-- Environment: FLEET_PLAN (cids, tokens, sessions; from examples/fleet_seed.rs), FLEET_NODES,
-- FLEET_GPUS, FLEET_FIRST (1-based first cluster of the mix; default 1), FLEET_MODE = mix |
-- flood (cluster FLEET_FIRST only, every report changes a card: a broken operator's loop).
dofile(os.getenv("FLEET_PLAN"))
local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  tid = tid or 0
  C = #cids
  N = tonumber(os.getenv("FLEET_NODES") or "500")
  G = tonumber(os.getenv("FLEET_GPUS") or "8")
  first = tonumber(os.getenv("FLEET_FIRST") or "1")
  mode = os.getenv("FLEET_MODE") or "mix"
  post_hdr, get_hdr = {}, {}
  for c = 1, C do
    post_hdr[c] = { ["Authorization"] = "Bearer " .. tokens[c], ["Content-Type"] = "application/json" }
    -- The two hostname GETs send no Content-Type.
    get_hdr[c] = { ["Authorization"] = "Bearer " .. tokens[c] }
  end
  mixC = C - first + 1
  nsess = 0
  for c = first, C do nsess = nsess + #sessions[c] end
  -- Heartbeats per 15 s = sessions / 4; node groups per 15 s = nodes.
  hb_every = 0
  if nsess > 0 then hb_every = math.max(1, math.floor(mixC * N * 4 / nsess)) end
  ts = os.date("!%Y-%m-%dT%H:%M:%S") .. ".123456789Z"
  k = tid * 7919
  j = 0
  n = 0
end

local function node_body(cid, node)
  return string.format('{"node_id":"gpu-node-%d","node_cpu":64,"node_mem_gb":503,"node_disk_gb":878,"role":"gpu","lossless_capable":true,"node_ready":true,"cluster_id":"%s"}', node, cid)
end

local function gpu_body(cid, c0, node, g, mem)
  return string.format('{"node_id":"gpu-node-%d","uuid":"GPU-%08x-%04x-4%03x-8000-000000000000","model":"NVIDIA A100-SXM4-80GB","mode":"fractional","total_mem_mb":%d,"used_mem_mb":0,"total_cores":100,"used_cores":0,"status":"ready","node_cpu":64,"node_ready":true,"node_mem_gb":503,"node_disk_gb":878,"cluster_id":"%s"}', node, c0, node, g, mem, cid)
end

local function heartbeat_body(cid, sid)
  return string.format('{"phase":"Heartbeat","node_name":"gpu-node-0","pod_ref":"gshare-sessions/ses-%s","trace_id":"0af7651916cd43dd8448eb211c80319c","generation":1,"restart_count":0,"container_state":"Running","cluster_id":"%s","ts":"%s"}', sid, cid, ts)
end

function request()
  if mode == "flood" then
    n = n + 1
    local g, node = n % G, math.floor(n / G) % N
    return wrk.format("POST", "/internal/inventory/gpu-devices", post_hdr[first],
      gpu_body(cids[first], first - 1, node, g, 40000 + (n + tid * 7) % 30000))
  end
  local c = first + (k % mixC)
  local node = math.floor(k / mixC) % N
  local cid = cids[c]
  local last = G + 2
  if hb_every > 0 and k % hb_every == 0 then last = G + 3 end
  local req
  if j == 0 then
    req = wrk.format("POST", "/internal/inventory/nodes", post_hdr[c], node_body(cid, node))
  elseif j <= G then
    req = wrk.format("POST", "/internal/inventory/gpu-devices", post_hdr[c], gpu_body(cid, c - 1, node, j - 1, 81920))
  elseif j == G + 1 then
    req = wrk.format("GET", "/internal/nodes/cordoned", get_hdr[c])
  elseif j == G + 2 then
    req = wrk.format("GET", "/internal/nodes/decommissioning", get_hdr[c])
  else
    local h = math.floor(k / hb_every)
    local hc = first + (h % mixC)
    local list = sessions[hc]
    local sid = list[(math.floor(h / mixC) % #list) + 1]
    req = wrk.format("POST", "/internal/sessions/" .. sid .. "/status", post_hdr[hc], heartbeat_body(cids[hc], sid))
  end
  j = j + 1
  if j > last then
    j = 0
    k = k + 1
  end
  return req
end
