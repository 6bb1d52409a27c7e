-- The live places (of waiting groups) on one name, read only: `{mode, token, ms left,
-- ticket, ms waited}` each. KEYS = h.

return places_of(KEYS[1], now_ms())
