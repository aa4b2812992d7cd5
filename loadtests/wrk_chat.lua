-- wrk script: non-streaming chat completions against the simulator (or the gateway).
-- Usage: wrk -t1 -c64 -d5s -s loadtests/wrk_chat.lua http://127.0.0.1:18000/v1/chat/completions
-- Set WRK_STREAM=1 in the environment for streaming requests, WRK_MAX_TOKENS for the length.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("WRK_API_KEY") or "sim")
local stream = os.getenv("WRK_STREAM") == "1"
wrk.body = '{"model":"' .. (os.getenv("WRK_MODEL") or "sim-model") .. '",'
  .. '"messages":[{"role":"user","content":"Say hello to the simulator, please."}],'
  .. '"max_tokens":' .. (os.getenv("WRK_MAX_TOKENS") or "16")
  .. (stream and ',"stream":true' or '') .. '}'

-- No response() hook: it would run Lua per response and slow wrk itself down; wrk prints
-- its own count of non-2xx responses.
