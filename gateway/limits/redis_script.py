"""The Redis limiter's Lua scripts: ``maths.py`` transcribed, so one replica or ten admit alike.

Redis runs a script atomically, so the check of every limit of every subject and the taking of
them all happen as one step across every gateway replica. The clock is Redis's own ``TIME``
(one clock for all replicas, so their skew cannot open a gap), unless a test passes ``now``.

Per subject: a hash ``rl rt tl tt day du`` (requests level and time, tokens level and time, the
UTC day and tokens used that day), with a budget also ``mp mc ms mf`` (its period, committed and
spent micro-units, the highest alert threshold fired: ``budgets.py``), and a sorted set of
in-flight request ids scored by lease expiry, so a slot a crashed replica never released frees
itself.

ARGV of ACQUIRE: now|"", tokens, request id, lease, n, money (the request's maximum cost), then
n x (rpm, tpm, concurrency, daily, budget, period kind, hard), -1 for "no limit" (period kinds:
``budgets.PERIOD_CODES``). Returns: admitted (0/1), now, day, then n x (rl, tl, in flight, day
used, budget period, committed), the state after taking (admitted) or before (refused); Python
finds which limit refused with the same ``maths.check``.
SETTLE settles a batch of requests in one call: ARGV now|"", count, then per request: reserved,
used, request id, day, n, money reserved, money used, and n x (tpm, daily, budget, period kind,
the reservation's budget period, alert thresholds as "50,80,100"); KEYS per request: its n
hashes, its n sets. It returns the alerts it decided, 5 numbers each: the request's place in the
batch, the subject's place in the request, the threshold, spent, the period. Deciding them in
the script that adds the cost is what makes each threshold fire once per period across replicas.

The day's turn follows ``maths.py``: the usage above the quota of each day passed carries over
(``carry``, which is why both scripts take the daily limit), a settlement on a later day than its
reservation charges only its excess, and a hash lives until the end of the last day its carried
usage still counts (``day_ttl``), so a debt of several days does not expire with the first.
"""

from __future__ import annotations

_COMMON = """
local PERIOD = 60
local DAY = 86400
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local today = math.floor(now / DAY)

local function refill(level, updated, cap)
  if cap < 0 then return math.huge end
  if level == nil then return cap end
  if now > updated then level = level + (now - updated) * cap / PERIOD end
  if level > cap then level = cap end
  return level
end

-- maths.carried: the usage of day that still counts today (daily -1: no limit)
local function carry(du, day, daily)
  if day == today then return du end
  if daily < 0 then return 0 end
  return math.max(0, du - daily * math.max(0, today - (day or -1)))
end

-- seconds until the end of the last day on which the usage du still counts
local function day_ttl(du, daily)
  return (today + math.max(1, math.ceil(du / daily))) * DAY - now
end

local function ttl(rl, rpm, tl, tpm, du, daily)
  local t = 1
  if rpm > 0 then t = math.max(t, (rpm - rl) * PERIOD / rpm) end
  if tpm > 0 then t = math.max(t, (tpm - tl) * PERIOD / tpm) end
  if daily > 0 then t = math.max(t, day_ttl(du, daily)) end
  return math.ceil(t) + 1
end

local function load(key, daily)
  local h = redis.call('HMGET', key, 'rl', 'rt', 'tl', 'tt', 'day', 'du')
  local du = carry(tonumber(h[6]) or 0, tonumber(h[5]), daily)
  return tonumber(h[1]), tonumber(h[2]) or now, tonumber(h[3]), tonumber(h[4]) or now, du
end

-- budgets.period_index: months since 1970 from days (H. Hinnant's civil_from_days)
local function month_of(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  return (y - 1970) * 12 + m - 1
end

local function period_of(kind)
  if kind == 1 then return today end
  if kind == 2 then return month_of(today) end
  return 0
end

-- seconds a budget's counters must outlive now: to its period's end (a month: at most 32 days)
local function money_ttl(kind)
  if kind == 1 then return (today + 1) * DAY - now end
  if kind == 2 then return 32 * DAY end
  return 3650 * DAY
end

-- the budget's counters (period, committed, spent, fired), begun again in a new period
local function money(key, budget, kind)
  if budget < 0 then return -1, 0, 0, 0 end
  local h = redis.call('HMGET', key, 'mp', 'mc', 'ms', 'mf')
  local p = period_of(kind)
  if tonumber(h[1]) ~= p then return p, 0, 0, 0 end
  return p, tonumber(h[2]) or 0, tonumber(h[3]) or 0, tonumber(h[4]) or 0
end

-- budgets.crossed: spent * 100 >= t * budget, split so no product passes 2^53
local function reached(spent, t, budget)
  local q, r = math.floor(budget / 100), budget % 100
  return (spent - t * q) * 100 >= t * r
end

local function store(key, rl, tl, du, rpm, tpm, daily, m)
  local fields = {'rt', now, 'tt', now, 'day', today, 'du', du}
  if rpm > 0 then table.insert(fields, 'rl'); table.insert(fields, rl) end
  if tpm > 0 then table.insert(fields, 'tl'); table.insert(fields, tl) end
  local t = ttl(rl, rpm, tl, tpm, du, daily)
  if m[1] >= 0 then
    for _, v in ipairs({'mp', m[1], 'mc', m[2], 'ms', m[3], 'mf', m[4]}) do
      table.insert(fields, v)
    end
    t = math.max(t, math.ceil(money_ttl(m[5])) + 1)
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('EXPIRE', key, t)
end
"""

ACQUIRE = (
    _COMMON
    + """
local tokens = tonumber(ARGV[2])
local rid = ARGV[3]
local lease = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local cost = tonumber(ARGV[6])
local st = {}
local ok = 1
for i = 1, n do
  local b = 6 + (i - 1) * 7
  local rpm, tpm, conc, daily = tonumber(ARGV[b+1]), tonumber(ARGV[b+2]),
    tonumber(ARGV[b+3]), tonumber(ARGV[b+4])
  local budget, kind, hard = tonumber(ARGV[b+5]), tonumber(ARGV[b+6]), tonumber(ARGV[b+7])
  local rl, rt, tl, tt, du = load(KEYS[i], daily)
  rl = refill(rl, rt, rpm)
  tl = refill(tl, tt, tpm)
  local mp, mc, ms, mf = money(KEYS[i], budget, kind)
  redis.call('ZREMRANGEBYSCORE', KEYS[n + i], '-inf', now)
  local inflight = redis.call('ZCARD', KEYS[n + i])
  if ok == 1 then
    if hard == 1 and cost > 0 and mc + cost > budget then ok = 0
    elseif rpm > 0 and rl < 1 then ok = 0
    elseif tpm > 0 and tl < tokens then ok = 0
    elseif conc > 0 and inflight >= conc then ok = 0
    elseif daily > 0 and du + tokens > daily then ok = 0
    end
  end
  st[i] = {rl, tl, inflight, du, rpm, tpm, daily, {mp, mc, ms, mf, kind}}
end
if ok == 1 then
  for i = 1, n do
    local s = st[i]
    s[1] = s[1] - 1
    s[2] = s[2] - tokens
    s[3] = s[3] + 1
    s[4] = s[4] + tokens
    if s[8][1] >= 0 then s[8][2] = s[8][2] + cost end
    store(KEYS[i], s[1], s[2], s[4], s[5], s[6], s[7], s[8])
    redis.call('ZADD', KEYS[n + i], now + lease, rid)
    redis.call('EXPIRE', KEYS[n + i], math.ceil(lease) + 1)
  end
end
local out = {ok, tostring(now), today}
for i = 1, n do
  local s = st[i]
  table.insert(out, tostring(s[1]))
  table.insert(out, tostring(s[2]))
  table.insert(out, s[3])
  table.insert(out, s[4])
  table.insert(out, s[8][1])
  table.insert(out, s[8][2])
end
return out
"""
)

SETTLE = (
    _COMMON
    + """
local a, k = 3, 1  -- the next ARGV and KEYS of the batch
local fired = {}
for r = 1, tonumber(ARGV[2]) do
  local reserved, used, rid = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2]
  local day, n = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local held, spent = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  a = a + 7
  for i = 1, n do
    local tpm, daily = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local budget, kind, period = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    local thresholds = ARGV[a + 5]
    a = a + 6
    local key = KEYS[k + i - 1]
    local h = redis.call('HMGET', key, 'tl', 'tt', 'day', 'du')
    local need = 0
    if tpm > 0 then
      local tl = refill(tonumber(h[1]), tonumber(h[2]) or now, tpm)
      tl = math.min(tpm, tl + reserved - used)
      redis.call('HSET', key, 'tl', tl, 'tt', now)
      need = (tpm - tl) * PERIOD / tpm
    end
    if daily > 0 then
      local du = carry(tonumber(h[4]) or 0, tonumber(h[3]), daily)
      if day < today then
        du = du + math.max(0, used - reserved)
      else
        du = math.max(0, du + used - reserved)
      end
      redis.call('HSET', key, 'day', today, 'du', du)
      need = math.max(need, day_ttl(du, daily))
    end
    if budget >= 0 then  -- budgets.settle_money, then budgets.crossed
      local mp, mc, ms, mf = money(key, budget, kind)
      if period == mp then
        mc = math.max(0, mc + spent - held)
        ms = ms + spent
      else
        local excess = math.max(0, spent - held)
        mc, ms = mc + excess, ms + excess
      end
      if ms > 0 then
        for t in string.gmatch(thresholds, '%d+') do
          t = tonumber(t)
          if t > mf and reached(ms, t, budget) then
            mf = t
            for _, v in ipairs({r, i, t, ms, mp}) do table.insert(fired, v) end
          end
        end
      end
      redis.call('HSET', key, 'mp', mp, 'mc', mc, 'ms', ms, 'mf', mf)
      need = math.max(need, money_ttl(kind))
    end
    -- never shorten the expiry: the requests bucket may need longer to refill
    if redis.call('TTL', key) < need + 1 then redis.call('EXPIRE', key, math.ceil(need) + 1) end
    redis.call('ZREM', KEYS[k + n + i - 1], rid)
  end
  k = k + 2 * n
end
return fired
"""
)
